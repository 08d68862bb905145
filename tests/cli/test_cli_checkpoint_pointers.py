"""`checkpoints/latest` pointing outside the run, as a user's resume and inspect meet it: one line, the
newest valid step of the run itself used, nothing outside read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def gpulab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "mlp"
    quiet = ("--set", "tensorboard=false", "--set", "checkpoint_every=6")
    proc = gpulab("train", "mlp", "--out", str(out), "--max-steps", "12", *quiet)
    assert proc.returncode == 0, proc.stderr
    return out


def _gpulab_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpulab:")]


def test_resume_refuses_latest_outside_the_run_and_uses_its_newest_step(trained, tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    shutil.copytree(trained, run)
    shutil.copytree(trained / "checkpoints", elsewhere)
    shutil.rmtree(run / "checkpoints" / "step-00000012")  # the run's own newest is now step 6
    (run / "checkpoints" / "latest").write_text("../../elsewhere/step-00000012\n")
    proc = gpulab("train", "mlp", "--out", str(run), "--max-steps", "14", "--resume", "latest")
    assert proc.returncode == 0, proc.stderr
    said = _gpulab_lines(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert [line for line in said if "latest refused" in line] == [said[0]] and "step-00000006" in said[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 14 and str(elsewhere) not in json.dumps(summary)


def test_inspect_names_the_pointer_and_inspects_the_run_own_newest_step(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "checkpoints" / "latest").write_text("../../../etc\n")
    proc = gpulab("checkpoint", "inspect", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "valid, step 12" in proc.stdout
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 2 and "latest refused" in notes[0] and "step-00000012" in notes[1]
