"""`gpulab bench` as a user meets it: real processes, files written, exit codes of compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def gpulab(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench-cli")
    proc = gpulab(
        "bench", "matmul", "accumulate", "--smoke", "--device", "cpu", "--threads", "1", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Matrix multiply" in proc.stdout and "wrote" in proc.stdout
    return out


def test_bench_writes_results_plots_and_report(run_dir):
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["schema_version"] == 1
    assert list(doc["suites"]) == ["matmul", "accumulate"]
    assert (run_dir / "matmul.png").is_file() and (run_dir / "accumulate.png").is_file()
    assert 'data-suite="accumulate"' in (run_dir / "report.html").read_text()


def _plant_regression(src: Path, dst: Path, factor: float) -> None:
    """B = A with every matmul time multiplied by ``factor`` (its spread moved along with it)."""
    doc = json.loads(src.read_text())
    for row in doc["suites"]["matmul"]["rows"]:
        fig = row["figures"]["time"]
        for field in ("value", "low", "high"):
            fig[field] *= factor
    dst.write_text(json.dumps(doc))


def test_compare_flags_a_planted_regression_with_exit_1(run_dir, tmp_path):
    a = run_dir / "results.json"
    slower = tmp_path / "slower.json"
    _plant_regression(a, slower, 10.0)
    proc = gpulab("bench", "compare", str(a), str(slower))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression" in proc.stdout
    assert "0 regression" not in proc.stdout


def test_compare_of_a_run_with_itself_passes(run_dir):
    a = str(run_dir / "results.json")
    proc = gpulab("bench", "compare", a, a)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 regression, 0 improvement" in proc.stdout


def test_compare_refuses_what_is_not_a_results_file_in_one_line(tmp_path):
    bogus = tmp_path / "bogus.json"
    bogus.write_text(json.dumps({"schema_version": 99}))
    proc = gpulab("bench", "compare", str(bogus), str(bogus))
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulab: error: ") and "schema_version" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_suite_exits_2_with_the_valid_choices():
    proc = gpulab("bench", "matmull", "--smoke")
    assert proc.returncode == 2
    assert "valid choices: matmul|precision|memory|accumulate|compile|parallel|transfer" in proc.stderr
    assert "Traceback" not in proc.stderr
