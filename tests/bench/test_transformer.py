"""`gpulab bench transformer`: the GPT-2-small step (tiny on a CPU) per variant, tokens/s and MFU."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from PIL import Image

from gpulab.bench import BenchConfig, run_bench
from gpulab.cli import main
from gpulab.engines.torch.bench import transformer
from gpulab.measure.harness import BenchContext
from gpulab.measure.results import RESULTS_FILE, Figure, Row, load_results


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("transformer")
    config = BenchConfig(suites=["transformer"], profile="smoke", device="cpu", out_dir=out, threads=1)
    doc = run_bench(config, log=lambda _: None)
    return doc["suites"]["transformer"], out


def test_every_variant_a_cpu_runs_has_tokens_step_time_and_mfu(smoke):
    suite, out = smoke
    assert suite["status"] == "ok", suite["notes"]
    assert load_results(out / RESULTS_FILE)["schema_version"] == 1  # the schema holds
    rows = {r["key"]["variant"]: r for r in suite["rows"]}
    assert list(rows) == ["hand-written", "eager", "compile", "compile+opt", "compile+chunked-ce"]
    for variant, row in rows.items():
        f, info = row["figures"], row["info"]
        assert f["step_time"]["unit"] == "ms" and f["step_time"]["repeats"] == 2
        tokens = info["batch"] * info["block_size"]
        # the same repeats: the fastest step is the highest rate
        assert f["tokens_per_s"]["high"] == pytest.approx(tokens * 1e3 / f["step_time"]["low"])
        assert f["mfu_measured"]["unit"] == "%" and 0 < f["mfu_measured"]["value"] <= 100
        assert "mfu" not in f  # a CPU has no datasheet peak
        assert "peak_memory" not in f  # a CPU reading would slow the variants timed after it
        assert info["precision"] == "fp32" and info.get("recompiles_after_first_step", 0) == 0
        assert ("compile_time" in f) == (variant != "eager") == info["compiled"]
        # gpulab / the hand-written loop, in tokens/s: the peer's own row has none
        assert ("vs_hand" in f) == (variant != "hand-written")
    assert rows["compile+opt"]["info"]["optimizer_compiled"] is True
    assert [v for v, r in rows.items() if r["info"].get("chunked_loss")] == ["compile+chunked-ce"]
    assert rows["compile"]["figures"]["speedup_vs_eager"]["unit"] == "x"
    hand, compiled = rows["hand-written"]["figures"], rows["compile"]["figures"]
    assert compiled["vs_hand"]["value"] == pytest.approx(
        hand["step_time"]["value"] / compiled["step_time"]["value"]
    )


def test_every_variant_runs_on_a_cpu_through_a_fake_graph_backend(one_thread):
    """What `gpulab bench transformer` runs on a GPU, run here: a name error shows in CI, not on the GPU."""
    ctx = BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=1, log=print, graphs=_ReplayByRerun())
    suite = transformer.run(ctx)
    rows = {r.key["variant"]: r for r in suite.rows}
    assert list(rows) == [
        "hand-written", "eager", "compile", "compile+opt", "compile+chunked-ce", "cuda-graph"
    ], suite.notes  # fmt: skip
    assert not any("error" in r.info for r in suite.rows), suite.notes
    assert rows["cuda-graph"].info["cuda_graph"]["mode"] == "graph"
    assert all(r.figures["tokens_per_s"].value > 0 for r in suite.rows)
    assert any(n.startswith("float8 skipped: Float8 training needs an H100-class GPU") for n in suite.notes)


def test_a_variant_that_fails_is_a_row_with_its_error_and_the_others_stay(monkeypatch, one_thread):
    real = transformer._one

    def compile_breaks(ctx, shape_name, shape, variant, *rest):
        if variant == "compile":
            raise AttributeError("'GraphStepper' object has no attribute 'forward'\nmore")
        return real(ctx, shape_name, shape, variant, *rest)

    monkeypatch.setattr(transformer, "_one", compile_breaks)
    suite = transformer.run(BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=1, log=print))
    rows = {r.key["variant"]: r for r in suite.rows}
    assert list(rows) == ["hand-written", "eager", "compile", "compile+opt", "compile+chunked-ce"]
    assert rows["compile"].figures == {}
    assert rows["compile"].info["error"] == "AttributeError: 'GraphStepper' object has no attribute 'forward'"
    assert (
        "compile failed (AttributeError: 'GraphStepper' object has no attribute 'forward'); the other "
        "variants ran." in suite.notes
    )
    assert rows["compile+opt"].figures["vs_hand"].value > 0  # measured, and compared, as before


def test_the_cuda_only_variants_are_skipped_in_one_line_each(smoke):
    notes = smoke[0]["notes"]
    assert "cuda-graph skipped: CUDA graphs need a CUDA GPU." in notes
    assert any(n.startswith("compile+max-autotune skipped: it is for the GPU's Triton GEMM") for n in notes)
    assert any(n.startswith("float8 skipped: Float8 training needs an H100-class GPU") for n in notes)
    assert any(n.startswith("MFU: ") and "fp32 peak" in n for n in notes)
    assert any(n.startswith("No peak memory for any row: not read on a CPU") for n in notes)


def test_the_plot_is_written(smoke):
    suite, out = smoke
    (plot,) = suite["plots"]
    with Image.open(out / plot["file"]) as image:
        assert image.width > 300 and image.height > 200


def test_skip_reasons_on_a_gpu(monkeypatch):
    cuda = torch.device("cuda", 0)
    assert transformer.skip_reason("cuda-graph", cuda) is None  # the Trainer's cuda_graph mode
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "H100-class" in transformer.skip_reason("float8", cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(transformer.importlib.util, "find_spec", lambda name: None)
    assert transformer.skip_reason("float8", cuda) == "Float8 training needs torchao (pip install torchao)"
    monkeypatch.setattr(transformer.importlib.util, "find_spec", lambda name: object())
    assert transformer.skip_reason("float8", cuda) is None
    assert transformer.skip_reason("compile", cuda) is None
    assert transformer.skip_reason("compile+max-autotune", cuda) is None


def test_an_optimizer_step_that_does_not_compile_runs_eager_and_says_so(monkeypatch, one_thread):
    def broken(optimizer, backend):
        eager = optimizer.step

        def fails(*args, **kwargs):
            raise RuntimeError("cannot trace this\nsecond line")

        optimizer.step = fails

        def restore():
            optimizer.step = eager

        return restore

    monkeypatch.setattr(transformer, "compile_optimizer_step", broken)
    ctx = BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=1, log=print)
    cfg = {"warmup": 1, "repeats": 1, "backend": "eager"}
    shape = transformer.SHAPES["micro"]
    peaks = transformer.Peaks("fp32", "cpu", None, 1e9)
    notes: list[str] = []
    row = transformer._one(ctx, "micro", shape, "compile+opt", "fp32", cfg, 10**6, peaks, notes)
    assert row.info["optimizer_compiled"] is False and row.info["compiled"] is True
    assert notes == [
        "compile+opt: the optimizer step did not compile (RuntimeError: cannot trace this); it ran eager."
    ]
    assert row.figures["mfu_measured"].value > 0


def test_the_max_autotune_row_compiles_with_inductors_autotuning_mode(monkeypatch, one_thread):
    """What the GPU runs, here with the mode recorded and aot_eager doing the compiling (inductor's GEMM
    autotuning is for a GPU): the row is built, compiled, and says its mode."""
    modes = []
    real = transformer.compile_model

    def recorded(model, mode, backend):
        modes.append((mode, backend))
        return real(model, mode, "aot_eager")

    monkeypatch.setattr(transformer, "compile_model", recorded)
    ctx = BenchContext(torch.device("cpu"), "smoke", warmup=1, repeats=1, log=print)
    cfg = {"warmup": 1, "repeats": 1, "backend": "inductor"}
    peaks = transformer.Peaks("fp32", "cpu", None, 1e9)
    notes: list[str] = []
    shape = transformer.SHAPES["micro"]
    row = transformer._one(ctx, "micro", shape, "compile+max-autotune", "fp32", cfg, 10**6, peaks, notes)
    assert modes == [("max-autotune-no-cudagraphs", "inductor")]
    assert row.info["compile_mode"] == "max-autotune-no-cudagraphs" and row.info["compiled"] is True
    assert row.figures["compile_time"].value > 0 and row.figures["tokens_per_s"].value > 0 and notes == []


@pytest.mark.slow
def test_quick_runs_on_the_cpu_with_inductor_and_prints_the_table(tmp_path, capsys):
    code = main(
        ["bench", "transformer", "--quick", "--device", "cpu", "--threads", "1", "--out", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    suite = json.loads((tmp_path / RESULTS_FILE).read_text())["suites"]["transformer"]
    assert suite["status"] == "ok"
    assert [r["key"]["model"] for r in suite["rows"]] == ["tiny"] * 5
    assert [r["key"]["variant"] for r in suite["rows"] if not r["info"]["compiled"]] == ["eager"]
    assert "mfu measured" in printed and re.search(r"│ tiny +│ compile\+opt +│", printed)  # one line each
    assert (tmp_path / "transformer.png").is_file()


def _mfu_script():
    path = Path(__file__).parents[2] / "benchmarks" / "transformer_mfu.py"
    spec = importlib.util.spec_from_file_location("transformer_mfu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_script_prints_mfu_per_variant_and_the_issue_target(smoke):
    summary = _mfu_script().summary
    suite = smoke[0]
    lines = summary({"suites": {"transformer": suite}})
    assert lines[0].startswith("micro hand-written ") and "MFU n/a of the datasheet peak" in lines[0]
    assert lines[1].startswith("micro eager ") and "x the hand loop" in lines[1]
    assert "cuda-graph skipped: CUDA graphs need a CUDA GPU." in lines
    assert lines[-2].startswith("MFU target: no compiled row with a datasheet MFU")
    assert lines[-1].startswith("hand-loop target (gpulab / hand >= 1.00, goal 1.10): best ")
    # as on a GPU: a datasheet MFU per row; only gpulab's compiled rows count for the target
    gpu = json.loads(json.dumps(suite))
    for row, mfu in zip(gpu["rows"], (70.0, 60.0, 44.0, 46.5, 45.5), strict=True):
        row["figures"]["mfu"] = {**row["figures"]["mfu_measured"], "value": mfu}
    assert summary({"suites": {"transformer": gpu}})[-2] == (
        "MFU target (>= 45 % with compile): best 46.5 %, MET"
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_step_runs_in_bf16_with_a_datasheet_mfu(tmp_path):
    config = BenchConfig(suites=["transformer"], profile="smoke", device="cuda", out_dir=tmp_path)
    suite = run_bench(config, log=print)["suites"]["transformer"]
    assert suite["status"] == "ok", suite["notes"]
    rows = {r["key"]["variant"]: r for r in suite["rows"]}
    assert {"eager", "compile", "compile+opt", "compile+chunked-ce", "cuda-graph"} <= set(rows)
    graph = rows["cuda-graph"]["info"]["cuda_graph"]
    assert graph["mode"] == "graph" and graph["captures"] == 1, graph
    for row in rows.values():
        assert row["info"]["precision"] == "bf16-mixed"
        assert row["info"]["recompiles_after_first_step"] == 0
        if "H100" in torch.cuda.get_device_name():
            assert 0 < row["figures"]["mfu"]["value"] < 100


def test_mfu_against_a_measured_peak_a_step_beat_is_rescaled_to_the_fresh_peak(monkeypatch):
    def fresh(self, achieved):  # as raise_beaten_peak does when the product still loses: the run's figure
        return replace(self, measured=achieved), "re-measured"

    monkeypatch.setattr(transformer.Peaks, "within_peak", fresh)
    peaks = transformer.Peaks("fp32", "cpu", None, 1e9)
    step = Figure.from_samples([1.0, 2.0], "ms", "lower")  # 1e6 FLOPs in 1 ms: 1e9 FLOP/s, then 2e9
    rows = [
        Row({"variant": "eager"}, {"step_time": step, "mfu_measured": Figure.from_samples([50, 100], "%")})
    ]
    notes: list[str] = []
    out = transformer._within_measured_peak(peaks, 2 * 10**6, rows, notes)
    assert out.measured == 2e9 and notes == ["Measured peak: re-measured."]
    mfu = rows[0].figures["mfu_measured"]
    assert (mfu.low, mfu.high) == (25, 50)


class _ReplayByRerun:
    """A CPU stand-in for torch.cuda's graphs: capture records, replay runs the captured step again."""

    def unsupported(self, device):
        return None

    def warmup(self, device):
        return contextlib.nullcontext()

    def capture(self, fn, device):
        return fn

    def replay(self, graph):
        graph()

    def synchronize(self, device):
        pass


def test_the_cuda_graph_row_steps_as_eager_does():
    """The row's ``GraphStepper`` is the Trainer's whole-step graph over the Stepper's batches: with replays
    that re-run the captured step on the CPU, its parameters equal eager's bit for bit."""
    from gpulab.engines.torch.bench import Stepper, single_runtime

    def train(graph: bool):
        with single_runtime(torch.device("cpu"), "fp32") as rt:
            stepper = Stepper(transformer.workload(transformer.SHAPES["micro"]), rt)
            step = transformer.GraphStepper(stepper, _ReplayByRerun()) if graph else stepper
            report = step.finish_warmup() if graph else None
            for _ in range(9 - (3 if graph else 0)):
                step.step()
            return stepper.parameters_vector(), report, getattr(step, "graph", None)

    eager, _, _ = train(False)
    graph, report, whole_step = train(True)
    assert report == {"mode": "graph", "warmup": 3, "captures": 1, "replays": 0, "eager": 0}
    assert whole_step.counts["replays"] == 6
    assert torch.equal(eager, graph)


def test_the_whole_step_graph_reports_no_peak_memory_and_says_why():
    """A replay allocates nothing (the graph's private pool holds the step): torch's peak counter read
    3.7 GiB on an H100 where the eager step holds 28 GiB, so the row says why it has no figure instead."""
    gpu = BenchContext(torch.device("cuda", 0), "smoke")
    reading = transformer._memory(gpu, "cuda-graph", step=lambda: pytest.fail("no step is run"))
    assert reading.figure is None and "private pool" in reading.kind
    cpu = BenchContext(torch.device("cpu"), "smoke")
    assert transformer._memory(cpu, "eager", step=lambda: None) is transformer.CPU_NO_MEMORY


def test_a_compiled_optimizer_step_prints_no_torch_profiler_notice():
    # `gpulab bench --quick` printed dynamo's "Profiler record function ... will be ignored" (torch's own
    # wrapper around every optimizer step) between its suite lines.
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("torch._dynamo.variables.ctx_manager")  # where dynamo says it
    log.addHandler(handler)
    try:
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, 4)).sum().backward()
        restore = transformer.compile_optimizer_step(optimizer, "eager")
        optimizer.step()
        restore()
    finally:
        log.removeHandler(handler)
    assert not [m for m in seen if "record function" in m], seen


def test_variants_runs_only_the_rows_named(tmp_path, one_thread):
    config = BenchConfig(
        suites=["transformer"], profile="smoke", device="cpu", out_dir=tmp_path, threads=1,
        variants=["hand-written", "compile"],
    )  # fmt: skip
    rows = run_bench(config, log=lambda _: None)["suites"]["transformer"]["rows"]
    assert [r["key"]["variant"] for r in rows] == ["hand-written", "compile"]
    assert "vs_hand" in rows[1]["figures"]
    assert json.loads((tmp_path / RESULTS_FILE).read_text())["config"]["variants"] == [
        "hand-written",
        "compile",
    ]


def test_a_variant_typo_is_one_line_before_anything_runs(tmp_path, cli):
    code, out = cli(
        "bench", "transformer", "--variants", "compile,complie", "--device", "cpu", "--out", str(tmp_path)
    )
    assert code == 2
    assert "unknown transformer variant 'complie'; valid choices: hand-written, eager, compile" in out
    assert not (tmp_path / RESULTS_FILE).exists()
    code, out = cli("bench", "matmul", "--variants", "compile", "--out", str(tmp_path))
    assert code == 2 and "--variants picks rows of the transformer suite" in out
