"""scripts/gpu_measure.sh's steps, run on the CPU at tiny sizes: what the GPU call runs first, proven here,
so a broken step shows in CI and not in the first minute of a lent GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("env", "transformer", "autotune", "train", "overhead")


@pytest.mark.slow
def test_every_step_of_the_gpu_script_runs_on_a_cpu(tmp_path):
    env = {
        **os.environ,
        "GPULAB_MEASURE_DEVICE": "cpu",
        "GPULAB_NO_WHEELS": "1",
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    proc = subprocess.run(
        ["bash", "scripts/gpu_measure.sh", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    exits = dict(re.findall(r"^== (\S+) .*?\n   exit (\d+) after", proc.stdout, re.S | re.M))
    assert exits == dict.fromkeys(STEPS, "0"), proc.stdout
    logs = {p.name for p in tmp_path.iterdir()}
    results = {"transformer-results.json", "autotune-results.json"}
    assert logs == {f"{s}.log" for s in STEPS} | results and len(logs) <= 8
    assert "sdpa: torch's order (attention: auto) picks FLASH_ATTENTION" in (tmp_path / "env.log").read_text()
    transformer = (tmp_path / "transformer.log").read_text()
    assert "hand-written" in transformer and "x the hand loop" in transformer
    assert "compile+opt" in transformer and "float8" not in transformer  # --variants: the rows asked for
    assert "hand-loop target (gpulab / hand >= 1.00, goal 1.10): best " in transformer
    autotune = (tmp_path / "autotune.log").read_text()
    assert "compile+max-autotune skipped: it is for the GPU's Triton GEMM autotuning" in autotune
    train = (tmp_path / "train.log").read_text()
    assert (
        "done in" in train and "diagnosis:" in train and "host-bound" not in train.split("diagnosis:")[1][:14]
    )
    assert "whole job" in (tmp_path / "overhead.log").read_text()
