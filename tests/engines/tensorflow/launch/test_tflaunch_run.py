"""`gpulab launch --engine tensorflow` with real workers: a 2-worker MultiWorkerMirroredStrategy job equal
to one worker at twice the batch; a dead worker ends the job naming it; a stopped launcher stops its
workers. Only the first needs TensorFlow (and is the one slow test: TF starts in ~5 s per process here).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
MWMS_JOB, EXIT_JOB = str(HERE / "tflaunch_mwms_job.py"), str(HERE / "tflaunch_exit_job.py")
STALL_JOB = str(HERE / "tflaunch_stall_job.py")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    return {**env, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gpulab", "launch", "--engine", "tensorflow", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_two_workers_train_like_one_worker_at_twice_the_batch(tmp_path):
    r = _launch("--nproc-per-node", "2", "--", MWMS_JOB, str(tmp_path), "8", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    w0, w1 = (json.loads((tmp_path / f"worker{i}.json").read_text()) for i in (0, 1))
    summary = json.loads((tmp_path / "summary.json").read_text())  # written by the chief only
    assert summary["world_size"] == w0["replicas"] == w1["replicas"] == 2
    assert [w0["tf_config"]["task"]["index"], w1["tf_config"]["task"]["index"]] == [0, 1]
    assert w0["losses"] == w1["losses"]  # strategy.reduce: both see the global loss
    for a, b, ref, init in zip(
        w0["weights"], w1["weights"], summary["reference"], summary["init"], strict=True
    ):
        a, b, ref, init = map(np.asarray, (a, b, ref, init))
        assert np.array_equal(a, b)  # the all-reduce kept the workers' replicas identical
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)  # = 1 worker at batch 16
        assert np.abs(a - init).max() > 1e-3  # and training really moved them


@pytest.mark.distributed
def test_a_worker_exiting_3_ends_the_job_naming_it(tmp_path):
    start = time.monotonic()
    logs = tmp_path / "logs"
    r = _launch("--nproc-per-node", "2", "--log-dir", str(logs), "--", EXIT_JOB, str(tmp_path), "1", "3")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "gpulab: error: the job failed: worker 1 (node 0, local 1) exited with code 3; worker(s) 0 stopped by "
        f"the launcher; each worker's own output is in {logs}/workerN.log"
    )
    # Worker 0 sleeps 120 s (tflaunch_exit_job.py): ending in under half of that, it was stopped, not waited
    # for, however long a loaded machine takes to start the launcher and the workers.
    assert time.monotonic() - start < 120 / 2
    seen = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in (0, 1)]
    assert seen[0]["cluster"] == seen[1]["cluster"] and [s["task"]["index"] for s in seen] == [0, 1]
    assert [(logs / f"worker{i}.log").read_text() for i in (0, 1)] == [
        "worker 0 started\n",
        "worker 1 started\n",
    ]


@pytest.mark.distributed
def test_a_suspended_worker_is_named_not_the_peer_that_died_of_losing_it(tmp_path):
    """Worker 1 is SIGSTOPped; worker 0 exits 1 when TensorFlow misses its heartbeats. The launcher used to
    blame worker 0 ("worker 0 ... exited with code 1; worker(s) 1 stopped by the launcher") and wait 30 s
    for a SIGTERM that a stopped process never handles."""
    logs = tmp_path / "logs"
    r = _launch("--nproc-per-node", "2", "--log-dir", str(logs), "--", STALL_JOB, str(tmp_path))
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        "gpulab: error: the job failed: worker 1 (node 0, local 1) was suspended (process state T: SIGSTOP "
        "or Ctrl-Z) and stopped answering its peers; the launcher killed it; worker 0 (node 0, local 0) "
        "exited with code 1 after losing worker(s) 1 (TensorFlow's coordination service: stopped sending "
        f"heartbeats); each worker's own output is in {logs}/workerN.log"
    )
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int((tmp_path / "worker1.pid").read_text()), 0)


@pytest.mark.distributed
def test_a_stopped_launcher_stops_its_workers(tmp_path):
    cmd = [sys.executable, "-m", "gpulab", "launch", "--engine", "tensorflow", "--nproc-per-node", "2", "--"]
    proc = subprocess.Popen(
        [*cmd, EXIT_JOB, str(tmp_path), "9", "0"], env=_env(), stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120  # generous: a loaded machine starts the launcher and workers slowly
    while len(list(tmp_path.glob("worker*.json"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the workers never started"
        time.sleep(0.05)
    pids = [json.loads((tmp_path / f"worker{i}.json").read_text())["pid"] for i in (0, 1)]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == (
        "gpulab: error: the launcher was stopped by SIGTERM and passed it on to its workers"
    )
    for pid in pids:  # reaped by the launcher: no such process any more
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sigusr1_to_the_launcher_is_passed_on_to_its_workers(tmp_path):
    """SLURM's requeue warning: the launcher outlives it and hands it to the workers (gpulab's workers
    checkpoint and requeue; these test workers take the signal's default action, so the job names them)."""
    cmd = [sys.executable, "-m", "gpulab", "launch", "--engine", "tensorflow", "--nproc-per-node", "2", "--"]
    proc = subprocess.Popen(
        [*cmd, EXIT_JOB, str(tmp_path), "9", "0"], env=_env(), stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("worker*.json"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the workers never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # the job failed (its workers died), the launcher was not killed
    assert "was killed by SIGUSR1" in err and "the launcher was stopped" not in err, err
