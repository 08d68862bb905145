"""`gpulab train` says when the machine was busy during the run (one line, and summary.json), as profile
and bench do: one CPU hog per core competes with a real training process on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpulab.hardware.load import usable_cores

HOG = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"


@pytest.mark.slow
def test_train_says_the_machine_was_busy(tmp_path):
    # One hog per usable core: two were enough on 2 cores, not on the 16 of a GPU machine.
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(usable_cores())]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpulab", "train", "mlp", "--out", str(tmp_path / "run"), "--max-steps", "100",
             "--device", "cpu", "--set", "tensorboard=false"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert proc.returncode == 0, proc.stderr
    load = json.loads((tmp_path / "run" / "summary.json").read_text())["machine_load"]
    assert load["busy"] is True and load["cpu_used_by_others"] > 0.2 and load["cores"] >= 1
    assert load["note"] in " ".join(proc.stdout.split())  # the same line, as the console wrapped it
    assert "OMP_NUM_THREADS=1" in load["note"]
