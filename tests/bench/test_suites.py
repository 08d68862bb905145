"""Every suite on the CPU with the tiny "smoke" profile: the schema, the figures, the plots."""

from __future__ import annotations

import importlib
import json
import warnings

import pytest
import torch
from PIL import Image

import gpulab.bench as bench
from gpulab.bench import BenchConfig, run_bench
from gpulab.engines.torch.bench import parallel, single_runtime
from gpulab.engines.torch.bench import run as torch_side
from gpulab.engines.torch.bench.run import SUITES
from gpulab.engines.torch.runtime import Runtime
from gpulab.errors import ConfigError, GpulabWarning
from gpulab.hardware import native_dtypes
from gpulab.measure import harness
from gpulab.measure.harness import BenchContext
from gpulab.measure.results import RESULTS_FILE, SPREADS, SuiteResult, load_results, validate

FIGURE_FIELDS = {"value", "unit", "repeats", "low", "high", "spread", "better"}
# parallel starts real processes: it has its own test below; transformer has its own file.
IN_PROCESS = [name for name in SUITES if name not in ("parallel", "transformer")]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # One thread: on a shared CI machine a second OpenMP thread mostly waits for a core.
    config = BenchConfig(suites=IN_PROCESS, profile="smoke", device="cpu", out_dir=out, threads=1)
    doc = run_bench(config, log=lambda _: None)
    return doc, out


def test_the_registry_holds_the_nine_suites_each_with_every_profile():
    assert list(SUITES) == [
        "matmul", "precision", "memory", "accumulate", "compile", "parallel", "transfer", "inference",
        "transformer",
    ]  # fmt: skip
    assert tuple(harness.PROFILES) == bench.PROFILE_NAMES
    for name in SUITES:
        module = importlib.import_module(f"gpulab.engines.torch.bench.{name}")
        assert set(module.PROFILES) == set(bench.PROFILE_NAMES), name


def test_results_json_follows_the_schema(smoke):
    doc, out = smoke
    assert validate(doc) == []
    on_disk = load_results(out / RESULTS_FILE)
    assert on_disk["schema_version"] == 1
    assert list(on_disk["suites"]) == IN_PROCESS
    for name, suite in on_disk["suites"].items():
        assert suite["status"] == "ok", (name, suite["notes"])
        assert suite["rows"], name
        assert suite["seconds"] > 0


def test_every_figure_carries_its_repeats_and_spread(smoke):
    doc, _ = smoke
    count = 0
    for suite in doc["suites"].values():
        for row in suite["rows"]:
            for fig in row["figures"].values():
                assert set(fig) == FIGURE_FIELDS
                assert isinstance(fig["repeats"], int) and fig["repeats"] >= 1
                assert fig["spread"] in SPREADS
                assert fig["low"] <= fig["value"] <= fig["high"]
                count += 1
    assert count > 50


def test_the_environment_is_recorded(smoke):
    env = smoke[0]["environment"]
    for key in (
        "gpulab",
        "torch",
        "python",
        "device_name",
        "date",
        "devices",
        "torch_threads",
        "nvml_status",
    ):
        assert key in env, key
    assert env["devices"][0]["type"] == "cpu"
    assert smoke[0]["config"]["profile"] == "smoke"


def test_every_plot_is_a_valid_non_blank_png(smoke):
    doc, out = smoke
    for name, suite in doc["suites"].items():
        assert suite["plots"], name
        for plot in suite["plots"]:
            path = out / plot["file"]
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            with Image.open(path) as image:
                image.verify()
            with Image.open(path) as image:
                assert image.width > 300 and image.height > 200
                extrema = image.convert("L").getextrema()
                assert extrema[0] < 100 < extrema[1], f"{path} looks blank"


def _rows(doc, suite):
    return doc["suites"][suite]["rows"]


def test_matmul_covers_the_four_dtypes_on_the_cpu_with_a_note(smoke):
    doc, _ = smoke
    rows = _rows(doc, "matmul")
    assert {r["key"]["dtype"] for r in rows} == {"fp32", "tf32", "bf16", "fp16"}
    assert all(r["figures"]["tflops"]["value"] > 0 for r in rows)
    assert any("No GPU" in n for n in doc["suites"]["matmul"]["notes"])


def test_precision_runs_both_models_in_every_precision(smoke):
    rows = _rows(smoke[0], "precision")
    assert {(r["key"]["model"], r["key"]["precision"]) for r in rows} == {
        (m, p) for m in ("digits", "chargpt-tiny") for p in ("fp32", "tf32", "bf16-mixed", "fp16-mixed")
    }
    for r in rows:
        assert {"step_time", "samples_per_s", "loss_after"} <= set(r["figures"])
        assert isinstance(r["info"]["diverged"], bool)
        # Peak memory is a figure only where it measures something; otherwise the row says why.
        assert ("peak_memory" in r["figures"]) != ("no_peak_memory" in r["info"])


def test_memory_marks_the_largest_batch_tried_when_the_limit_was_not_reached(smoke):
    rows = _rows(smoke[0], "memory")
    assert [r["key"]["batch"] for r in rows] == [2, 4]
    assert [r["info"].get("largest_tried", False) for r in rows] == [False, True]
    assert not any(r["info"].get("largest_fit") for r in rows)


def test_memory_limit_stops_the_sweep(tmp_path):
    ctx = BenchContext(torch.device("cpu"), "smoke", warmup=0, repeats=1, memory_limit_bytes=1, log=print)
    result = SUITES["memory"](ctx)
    assert [r.info["fits"] for r in result.rows] == [False]
    assert not any(r.info.get("largest_fit") for r in result.rows)


def test_accumulation_is_equivalent(smoke):
    rows = _rows(smoke[0], "accumulate")
    assert [r["key"]["k"] for r in rows] == [1, 2]
    assert all(r["info"]["equivalent"] for r in rows)


def test_compile_shows_compile_time_apart(smoke):
    rows = {r["key"]["variant"]: r for r in _rows(smoke[0], "compile")}
    assert "compile_time" not in rows["eager"]["figures"]
    assert rows["default"]["figures"]["compile_time"]["unit"] == "s"
    assert rows["default"]["info"]["compiled"] is True


def test_transfer_without_gpu_says_so(smoke):
    doc, _ = smoke
    rows = _rows(doc, "transfer")
    assert {r["key"]["test"] for r in rows} == {"copy", "train step"}
    assert any("n/a" in n for n in doc["suites"]["transfer"]["notes"])


@pytest.mark.distributed
def test_inference_times_every_runtime_at_every_batch_and_checks_its_output(smoke):
    rows = _rows(smoke[0], "inference")
    runtimes = {r["key"]["runtime"] for r in rows}
    assert runtimes == {"eager", "exported", "onnxruntime", "torchscript"}
    assert {(r["key"]["runtime"], r["key"]["batch"]) for r in rows} == {
        (t, b) for t in runtimes for b in (1, 8)
    }
    for r in rows:
        f = r["figures"]
        assert f["latency_p50"]["unit"] == "ms" and f["latency_p99"]["value"] >= f["latency_p50"]["low"]
        assert f["throughput"]["value"] == pytest.approx(
            r["key"]["batch"] * 1e3 / f["latency_p50"]["value"], rel=0.5
        )
        assert r["info"]["max_abs_diff_vs_eager"] < 1e-4  # every runtime computes what eager computes


def test_parallel_ddp_over_two_gloo_processes_matches_one_process():
    ctx = BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=2, log=print)
    result = parallel.run(ctx)
    single, ddp = result.rows
    assert (single.key["mode"], ddp.key["mode"], ddp.key["processes"]) == ("single", "ddp", 2)
    assert ddp.info["equal_to_single"], ddp.info
    assert ddp.figures["time_vs_single"].repeats == 2
    assert json.dumps(result.to_json(), allow_nan=False)


def test_unknown_suite_is_a_config_error():
    with pytest.raises(ConfigError, match="valid choices: matmul"):
        BenchConfig(suites=["matmull"]).suite_names()


def test_a_failing_suite_is_recorded_and_the_others_still_run(tmp_path, monkeypatch):
    def boom(ctx):
        raise RuntimeError("kaput")

    def fine(ctx):
        return SuiteResult(title="fine")

    monkeypatch.setattr(torch_side, "SUITES", {"boom": boom, "fine": fine})
    monkeypatch.setattr(bench, "SUITE_NAMES", ("boom", "fine"))
    threads = torch.get_num_threads()
    config = BenchConfig(profile="smoke", device="cpu", out_dir=tmp_path, threads=1)
    doc = run_bench(config, log=lambda _: None)
    assert torch.get_num_threads() == threads  # --threads does not outlive the run
    assert doc["environment"]["torch_threads"] == 1
    assert doc["suites"]["boom"]["status"] == "error"
    assert "kaput" in doc["suites"]["boom"]["notes"][0]
    assert doc["suites"]["fine"]["status"] == "ok"
    assert (tmp_path / "report.html").is_file()


def test_the_report_holds_every_suite_that_ran(smoke):
    doc, out = smoke
    html = (out / "report.html").read_text()
    for name in doc["suites"]:
        assert f'data-suite="{name}"' in html
    assert html.count("data:image/png;base64,") == sum(len(s["plots"]) for s in doc["suites"].values())


def test_precision_says_why_mixed_precision_is_slower_on_a_small_model():
    from gpulab.measure.bench_rows import launch_bound_notes
    from gpulab.measure.results import Figure, Row

    def row(model, precision, speedup):
        return Row(
            {"model": model, "precision": precision}, {"speedup_vs_fp32": Figure.single(speedup, "x")}, {}
        )

    rows = [row("digits", "fp32", 1.0), row("digits", "bf16-mixed", 0.66), row("digits", "fp16-mixed", 0.39)]
    rows += [row("chargpt-gpu", "fp32", 1.0), row("chargpt-gpu", "bf16-mixed", 2.5)]
    (note,) = launch_bound_notes(rows)
    assert note.startswith("digits: bf16-mixed and fp16-mixed slower than fp32") and "launch-bound" in note


def test_a_suite_timing_an_emulated_precision_prints_no_run_advice(monkeypatch):
    # `gpulab bench --quick` printed "use --precision fp32 (or auto)" from its precision suite's fp16 row.
    monkeypatch.setattr(native_dtypes, "native_dtypes", lambda device: {"bf16": False, "fp16": False})
    with warnings.catch_warnings(record=True) as run_warned:
        warnings.simplefilter("always")
        Runtime("cpu", "fp16-mixed", "single")  # a run that asked for it is told
    assert any(issubclass(w.category, GpulabWarning) for w in run_warned)
    with warnings.catch_warnings(record=True) as bench_warned:
        warnings.simplefilter("always")
        single_runtime(torch.device("cpu"), "fp16-mixed")
    assert not [w for w in bench_warned if issubclass(w.category, GpulabWarning)]
