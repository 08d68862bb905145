"""benchmarks/overhead.py runs end to end and reports every figure PERF.md quotes (not its speed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"


@pytest.mark.slow
def test_overhead_benchmark_reports_all_variants_and_ratios():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeats", "1", "--warmup-rounds", "0", "--json"], capture_output=True, text=True, env=env,
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the figures alone: progress bars go to stderr
    assert set(report["us_per_step_median"]) == {
        "a_seed_loop",
        "b_trainer_same_dataloader",
        "b0_trainer_optimizer_as_given",
        "c_trainer_tensors",
        "cm_trainer_tensors_mfu",
    }
    assert all(us > 0 for us in report["us_per_step_median"].values())
    ratios = report["ratios"]
    assert {
        "b_over_a_per_step",
        "b0_over_a_per_step",
        "a_over_c_per_step",
        "a_over_cm_whole",
    } <= ratios.keys()
    assert {"a_over_cm_process", "a_over_c_whole"} <= ratios.keys()
    for figures in ("whole_job_s_median", "process_s_median"):
        assert report[figures].keys() == report["us_per_step_median"].keys()
        assert all(s > 0 for s in report[figures].values())
    # the seed's loop: 10,000 samples, batch 64, 5 epochs, one thread
    assert report["steps_per_run"] == 5 * 157 and report["threads"] == 1 and report["samples"] == 10_000
    assert (report["repeats"], report["warmup_rounds"]) == (1, 0)  # one counted round, none thrown away
