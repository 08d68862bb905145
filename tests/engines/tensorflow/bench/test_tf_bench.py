"""``gpulab bench --engine torch,tensorflow``: the TensorFlow side of the suites on the CPU, smoke profile.

One run_bench with both engines: the torch suites in this process, every TensorFlow suite in ONE worker
subprocess (TensorFlow is never imported here). Checks the schema (engine on every suite and row), the
comparison section and its plot, the report's PyTorch-vs-TensorFlow table, the line for a suite without a
TensorFlow side, and that the TensorFlow rows measure real work (accumulation equivalence holds there too).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from gpulab.bench import BenchConfig, run_bench
from gpulab.engines.tensorflow.bench import TF_SUITES
from gpulab.measure.results import RESULTS_FILE, load_results

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]

SUITES = [*TF_SUITES, "transfer"]  # transfer has no TensorFlow side: skipped there, in one line


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfbench")
    lines: list[str] = []
    config = BenchConfig(
        suites=SUITES, profile="smoke", device="cpu", out_dir=out, threads=1, engines=["torch", "tensorflow"]
    )
    before = set(sys.modules)
    doc = run_bench(config, log=lines.append)
    # What the run imported here (another test in this worker may have loaded TensorFlow already).
    _IMPORTED.update(m for m in set(sys.modules) - before if m.split(".")[0] in ("tensorflow", "keras"))
    return doc, out, lines


_IMPORTED: set[str] = set()


def test_tensorflow_is_not_loaded_in_the_torch_process(both):
    assert not _IMPORTED, sorted(_IMPORTED)[:5]


def test_every_suite_and_row_says_its_engine_and_the_tensorflow_suites_ran(both):
    _, out, _ = both
    doc = load_results(out / RESULTS_FILE)  # validates the schema
    assert list(doc["suites"]) == [*SUITES, *(f"tf-{n}" for n in TF_SUITES)]
    for name, suite in doc["suites"].items():
        engine = "tensorflow" if name.startswith("tf-") else "torch"
        assert suite["status"] == "ok", (name, suite["notes"])
        assert suite["engine"] == engine and suite["rows"], name
        assert all(row["info"]["engine"] == engine for row in suite["rows"]), name
    assert doc["environment"]["tensorflow"] and doc["environment"]["tf_device"] == "/CPU:0"
    assert doc["config"]["engines"] == ["torch", "tensorflow"]
    # Real work on TensorFlow: accumulation gives one big batch's step, matmul's keys are torch's.
    assert all(r["info"]["equivalent"] for r in doc["suites"]["tf-accumulate"]["rows"])
    assert {r["key"]["dtype"] for r in doc["suites"]["tf-matmul"]["rows"]} == {"fp32", "tf32", "bf16", "fp16"}
    # No peak memory from TensorFlow on a CPU: said, not zero.
    for row in doc["suites"]["tf-precision"]["rows"]:
        assert "peak_memory" not in row["figures"] and "n/a on CPU" in row["info"]["no_peak_memory"]


def test_the_suite_without_a_tensorflow_side_is_skipped_in_one_line(both):
    doc, _, lines = both
    reason = (
        "suite 'transfer' skipped on engine tensorflow: it has no TensorFlow side "
        "(suites that have one: matmul|precision|memory|accumulate|compile)"
    )
    assert reason in lines
    assert doc["skipped"] == [{"suite": "transfer", "engine": "tensorflow", "reason": reason}]


def test_the_comparison_pairs_the_same_workloads_with_compile_speedups(both):
    doc, out, _ = both
    rows = doc["comparison"]["rows"]
    assert {r["suite"] for r in rows} == set(TF_SUITES)
    for row in rows:
        assert row["torch"]["time"]["value"] > 0 and row["tensorflow"]["time"]["value"] > 0, row["workload"]
    compiled = [r for r in rows if r["workload"] == "compile: mlp default / xla"]
    assert (
        compiled and compiled[0]["torch"]["compile_speedup"] and compiled[0]["tensorflow"]["compile_speedup"]
    )
    for name in TF_SUITES:  # one side-by-side plot per suite
        assert (out / f"versus-{name}.png").stat().st_size > 1000
    for name in TF_SUITES:  # the TensorFlow plots do not overwrite torch's
        assert (out / f"tf-{name}.png").is_file() and (out / f"{name}.png").is_file()


def test_the_report_has_the_pytorch_vs_tensorflow_table(both):
    _, out, _ = both
    html = (out / "report.html").read_text()
    assert '<section id="comparison"><h2>PyTorch vs TensorFlow</h2>' in html
    table = html.split('<table class="results versus">')[1].split("</table>")[0]
    assert "PyTorch time (ms)" in table and "TensorFlow peak memory (MiB)" in table
    assert "<td>TFLOP/s</td>" in table and "<td>samples/s</td>" in table  # matmul's and the steps' units
    assert "precision: digits fp32" in table and 'title="n/a on CPU' in table
    assert "suite &#x27;transfer&#x27; skipped on engine tensorflow" in html
