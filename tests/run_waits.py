"""Waiting for a real training process to reach its loop, for the tests that then signal or kill it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest


def wait_for_a_logged_step(proc: subprocess.Popen, out: Path, timeout: float, tail: int = 2000) -> None:
    """Until the run in ``out`` has logged a step (it is inside the training loop); a run that ends first,
    or never logs, fails the test with the last ``tail`` characters of its stderr."""
    deadline = time.monotonic() + timeout
    metrics = out / "metrics.jsonl"
    while time.monotonic() < deadline:
        if metrics.is_file() and metrics.read_text().strip():
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it was signalled: {proc.communicate()[1][-tail:]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("the run never logged a step")
