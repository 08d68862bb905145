"""`gpulab train --resume` as a user meets it: finished runs, changed settings, corrupt checkpoints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def gpulab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True)


def train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return gpulab("train", "mlp", "--out", str(out), "--set", "tensorboard=false", *extra)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """An mlp run of 30 steps with checkpoints at 10, 20 and 30 (copy it before changing it)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = train(out, "--max-steps", "30", "--set", "checkpoint_every=10", "--set", "keep_last=null")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def test_resuming_a_finished_run_says_so_and_leaves_the_summary(run_dir):
    before = {name: (run_dir / name).read_bytes() for name in ("summary.json", "metrics.jsonl")}
    proc = train(run_dir, "--max-steps", "30", "--resume", "latest")
    assert proc.returncode == 0, proc.stderr
    assert "nothing to do" in proc.stdout and "step 30 of 30" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert {name: (run_dir / name).read_bytes() for name in before} == before
