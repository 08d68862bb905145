"""kill -9 of rank 0 (which hosts the c10d store) under a real ``gpulab launch`` of 2 ranks: the survivor's
line names rank 0's node, and no C++ backtrace follows it (before: 78 lines of c10d store warnings' frames)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from test_cli_early_signal import TRAIN, start
from test_cli_requeue import descendants

from gpulab.engines.torch.distributed.watchdog import HOST


def rank_zero(launcher: int) -> int | None:
    for pid in descendants(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"LOCAL_RANK=0" in environ and b"RANK=0" in environ:
            return pid
    return None


@pytest.mark.distributed
def test_kill_9_of_rank_0_names_its_node_without_cpp_frames(tmp_path):
    train = [*TRAIN[:-4], "--max-steps", "100000", "--set", "options.pause=0.05", "--out", "run"]
    proc = start(["launch", "--nproc-per-node", "2", "--", "gpulab", *train], tmp_path)
    metrics, deadline = tmp_path / "run" / "metrics.jsonl", time.monotonic() + 180
    while not (metrics.is_file() and metrics.read_text().strip()):  # both ranks are in the loop
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    os.kill(rank_zero(proc.pid), signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    lines = stderr.splitlines()
    assert not [line for line in lines if line.startswith("frame #")], stderr
    named = [line for line in lines if "gpulab" in line and f"rank 0 on {HOST} has probably exited" in line]
    assert named, stderr
    assert "rank 0 (local rank 0) was killed by SIGKILL" in lines[-1]
