"""A stop signal while a job's processes are still starting (SLURM's warning may come seconds after the
start of a short job): real, fresh ``python -m gpulab`` processes (not forked from the tests' fork server,
which has torch loaded) are signalled the moment their handler is installed, before torch is imported, and
still end with a checkpoint and the job requeued (``scontrol`` a script on PATH that records its arguments).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli_requeue import JOB, descendants, slurm_env

from gpulab.early_signals import job_verb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRAIN = ["train", "preempt_recipe:build", "--set", "mfu=false", "--max-steps", "50", "--out", "run"]


def handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signum - 1) & 1)


def has_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def start(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, **slurm_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)])}
    return subprocess.Popen([sys.executable, "-m", "gpulab", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def first_handler(proc: subprocess.Popen, signum: int, pid: int | None = None) -> int:
    """Wait until ``pid`` (default: the process itself) handles ``signum``; its pid."""
    pid = proc.pid if pid is None else pid
    deadline = time.monotonic() + 60
    while not handles(pid, signum):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.001)
    return pid


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_before_the_framework_import_ends_in_a_checkpoint(tmp_path, signum):
    proc = start(TRAIN, tmp_path)
    first_handler(proc, signum)
    assert not has_torch(proc.pid)  # still starting: torch is not loaded yet
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=180)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert f"gpulab: stopped: {name} at step 1: saved checkpoint run/checkpoints/step-00000001" in stderr
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step-00000001"
    requeued = (tmp_path / "scontrol.log").read_text().splitlines() if signum == signal.SIGUSR1 else []
    assert requeued == ([f"requeue {JOB}"] if signum == signal.SIGUSR1 else []), stderr


@pytest.mark.distributed
def test_a_warning_to_the_launcher_before_its_workers_start_reaches_them(tmp_path):
    """SLURM signals the processes a step has: a launcher still importing torch has no workers to pass it
    to. Each of its 2 workers then starts, is itself signalled before its framework import (rank 1 only),
    and both stop at their first step boundary with one checkpoint; rank 0 requeues the job."""
    proc = start(["launch", "--nproc-per-node", "2", "--", "gpulab", *TRAIN], tmp_path)
    first_handler(proc, signal.SIGUSR1)
    assert not has_torch(proc.pid)
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2:  # both workers handle USR1 (they have started, torch not imported yet)
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        workers = [p for p in descendants(proc.pid) if handles(p, signal.SIGUSR1) and b"train" in cmdline(p)]
        time.sleep(0.001)
    os.kill(max(workers), signal.SIGUSR1)  # a copy to one worker too, as SLURM's reaches whoever exists
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode != -signal.SIGUSR1, stderr  # the launcher outlived it
    stop = [line for line in stderr.splitlines() if line.startswith("gpulab: stopped: SIGUSR1 at step ")]
    assert len(stop) == 1, stderr  # rank 0's, once
    # at the first step boundary the ranks agree on (their requests are summed one step late)
    step = int(stop[0].split(" at step ")[1].split(":")[0])
    assert step <= 2 and f"saved checkpoint run/checkpoints/step-{step:08d}" in stop[0], stderr
    assert (tmp_path / "scontrol.log").read_text().splitlines() == [f"requeue {JOB}"], stderr
    assert "second SIGUSR1" not in stderr


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_only_a_jobs_verbs_hold_the_signals_early():
    module = ["python", "-m", "gpulab"]
    assert job_verb(["-m", "train", "mlp"], [*module, "train", "mlp"])
    assert job_verb(["/venv/bin/gpulab", "--debug", "launch", "--", "x.py"], [])
    assert not job_verb(["/venv/bin/gpulab", "doctor"], [])  # stops on SIGTERM as any command
    assert not job_verb(["train.py", "train"], ["python", "train.py", "train"])  # a user's script
