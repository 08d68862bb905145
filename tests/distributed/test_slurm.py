"""A real SLURM cluster (scripts/slurm_cluster.sh: slurmctld + two slurmd, each node a network namespace with
its own hostname), used as a user would from its login node: sbatch, srun, scancel, scontrol.

- the sbatch script `gpulab launch --print slurm` renders trains mlp with DDP over the two nodes (gloo) and
  ends on the weights of one process at twice the batch; the same for TensorFlow (MultiWorkerMirroredStrategy,
  each worker's TF_CONFIG from SLURM's variables);
- `scancel` mid-run leaves a checkpoint, a resubmitted job resumes it, a SIGKILL of every process loses
  only the steps since a checkpoint, and the run ends bit-exactly as one never stopped, with every
  tracker's history equal to metrics.jsonl; SIGUSR1 requeues the job attempt after attempt; a node that
  dies mid-run ends the job with a line naming it;
- `gpulab launch` in an srun step reads nodes, rank and rendezvous host from SLURM without being told (the
  last job of the scancel test).

Skips (one reason) where the packages, root or namespaces are missing; `make test` installs the packages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import job_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "slurm_cluster.sh"
MWMS_JOB = ROOT / "tests" / "engines" / "tensorflow" / "launch" / "tflaunch_mwms_job.py"
PREEMPT = ["preempt_recipe:build", "--set", "mfu=false", "--set", "options.pause=0.02"]
TOL = 1e-5  # as tests/distributed/test_ddp.py: 2 ranks vs one process at twice the batch
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
}

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root

    def login(self, *cmd: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """CMD on the login node (the controller's namespace), with the jobs' environment."""
        return subprocess.run([str(CLUSTER), "login", str(self.root), *cmd], capture_output=True, text=True,
                              cwd=cwd, env=user_env(), timeout=timeout)  # fmt: skip

    def sbatch(self, script: str, cwd: Path, *flags: str) -> str:
        (cwd / "job.sh").write_text(script)
        r = self.login("sbatch", "--parsable", *flags, "job.sh", cwd=cwd)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        r = self.login("scontrol", "show", "job", "-o", job)
        found = re.search(r"JobState=(\S+)", r.stdout)
        return found.group(1) if found else "UNKNOWN"

    def wait(self, job: str, timeout: float = 120) -> str:
        """Poll the job's state until it has ended; its final state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(job)
            if state in ENDED:
                return state
            time.sleep(0.2)
        self.login("scancel", job)
        pytest.fail(f"job {job} still {state} after {timeout} s")


def user_env() -> dict[str, str]:
    """A user's shell: the venv's python first on PATH (the script runs `python -m gpulab`), no SLURM_*
    inherited from an outer job; preempt_recipe importable."""
    env = {k: v for k, v in job_env(TF_CPP_MIN_LOG_LEVEL="2").items() if not k.startswith("SLURM_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests" / "cli"), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    try:
        # Owned by this test session: a later session removes the cluster only once this one is gone.
        owner = {**os.environ, "GPULAB_SLURM_OWNER": str(os.getpid())}
        up = subprocess.run(
            [str(CLUSTER), "up", str(root)], capture_output=True, text=True, timeout=120, env=owner
        )
        if up.returncode == 3:  # this machine cannot: no root, no packages or no namespaces
            pytest.skip(up.stderr.strip().splitlines()[-1])
        assert up.returncode == 0, up.stderr
        yield Cluster(root)
    finally:
        subprocess.run([str(CLUSTER), "down", str(root)], capture_output=True, timeout=60)


def rendered(*args: str) -> str:
    """The sbatch script `gpulab launch --print slurm` writes for 2 nodes x 1 process on a CPU cluster."""
    cmd = [sys.executable, "-m", "gpulab", "launch", "--nnodes", "2", "--nproc-per-node", "1",
           "--gpus-per-node", "0", "--print", "slurm", *args]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=user_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def output(cwd: Path, job: str) -> str:
    return (cwd / f"gpulab-{job}.out").read_text()


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gpulab", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=user_env(), timeout=180)


def final_weights(out: Path) -> dict:
    latest = (out / "checkpoints" / "latest").read_text().strip()
    return load_file(out / "checkpoints" / latest / "model.safetensors")


RUN = ["train", *PREEMPT, "--max-steps", "200", "--out", "run"]  # the run scancel and SIGUSR1 stop


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, gpulab_server) -> dict:
    """RUN's final weights, never stopped, from 2 processes on this machine (gloo's 2-rank sums are the
    same over any link): one reference for the scancel and the requeue tests. The launcher is forked from
    gpulab_server (tests/conftest.py), its 2 ranks start as always."""
    where = tmp_path_factory.mktemp("uninterrupted")
    argv = ["launch", "--nproc-per-node", "2", "--", "gpulab", *RUN[:-1], "ref"]
    ref = gpulab_server.start("gpulab.cli:main", argv, stderr=where / "launch", cwd=where, environ=user_env())
    _, stderr = ref.communicate(timeout=180)
    assert ref.returncode == 0, stderr[-3000:]
    return final_weights(where / "ref")


def until_training(cluster: Cluster, job: str, where: Path, ready, deadline: float) -> None:
    """Until ``ready()`` (read from the run's files every 0.1 s); the job's state is asked once a second, as
    each `scontrol` is a process on the 2 cores the job's nodes share. ``where``: the job's folder."""
    asked = 0.0
    while not ready():
        now = time.monotonic()
        assert now < deadline, f"job {job}: not there by the deadline: {output(where, job)[-3000:]}"
        if now - asked >= 1:
            asked = now
            if cluster.state(job) in ENDED:
                pytest.fail(f"job {job} ended before it got there: {output(where, job)[-3000:]}")
        time.sleep(0.1)


def wait_for_training(cluster: Cluster, job: str, out: Path, timeout: float = 120) -> None:
    """Until the job's run has logged a step (it is inside the training loop on both nodes)."""
    metrics = out / "metrics.jsonl"
    until_training(cluster, job, out.parent, lambda: metrics.is_file() and bool(metrics.read_text().strip()),
                   time.monotonic() + timeout)  # fmt: skip


def test_the_rendered_sbatch_script_as_an_array_of_two_trains_two_runs_each_like_one_process_at_twice_the_batch(
    cluster, tmp_path, cli
):
    """Each element of ``--array 0-1`` trains mlp with DDP over the two nodes, its $SLURM_ARRAY_TASK_ID in
    its --out: two runs, two logs (before: one shared --out, the second element printed `nothing to do`),
    each ending on the weights of one process at twice the batch."""
    run = ["train", "mlp", "--max-steps", "20", "--set", "mfu=false", "--set", "tensorboard=false"]
    script = rendered("--array", "0-1", "--", "gpulab", *run, "--out", "ddp-$SLURM_ARRAY_TASK_ID",
                      "--batch-size", "32")  # fmt: skip
    job = cluster.sbatch(script, tmp_path)
    # the one process in this one (the cli fixture), while the job runs: only its weights are read
    code, err = cli(*run, "--out", "ref", "--batch-size", "64", cwd=tmp_path)
    assert code == 0, err[-3000:]
    want = final_weights(tmp_path / "ref")
    for index in (0, 1):
        element = f"{job}_{index}"
        log = (tmp_path / f"gpulab-{element}.out").read_text
        assert cluster.wait(element, timeout=180) == "COMPLETED", log()[-3000:]
        assert log().count("1 process(es) per node x 2 node(s), backend gloo, rendezvous n1:29400") == 2, (
            log()
        )
        assert "nothing to do" not in log()
        out = tmp_path / f"ddp-{index}"
        assert json.loads((out / "summary.json").read_text())["steps"] == 20
        got = final_weights(out)
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=TOL, msg=f"{element} {name}")


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_the_rendered_tensorflow_script_trains_over_two_nodes_like_one_worker_at_twice_the_batch(
    cluster, tmp_path
):
    job = cluster.sbatch(rendered("--engine", "tensorflow", "--", str(MWMS_JOB), "tf", "8", "5"), tmp_path)
    assert cluster.wait(job, timeout=150) == "COMPLETED", output(tmp_path, job)[-3000:]
    w0, w1 = (json.loads((tmp_path / "tf" / f"worker{i}.json").read_text()) for i in (0, 1))
    assert [w["tf_config"]["cluster"]["worker"] for w in (w0, w1)] == [["n1:23456", "n2:23456"]] * 2
    assert [w0["tf_config"]["task"]["index"], w1["tf_config"]["task"]["index"]] == [0, 1]
    summary = json.loads((tmp_path / "tf" / "summary.json").read_text())
    assert summary["world_size"] == 2
    for a, b, ref in zip(w0["weights"], w1["weights"], summary["reference"], strict=True):
        a, b, ref = map(np.asarray, (a, b, ref))
        assert np.array_equal(a, b)
        # as tests/engines/tensorflow/launch: 1 worker at batch 16
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


def steps_logged(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    text = path.read_text() if path.is_file() else ""
    return [json.loads(line)["step"] for line in text.splitlines() if line.endswith("}")]


def test_sigusr1_requeues_the_job_attempt_after_attempt_even_as_it_starts_and_it_finishes_bit_exactly(
    cluster, tmp_path, uninterrupted
):
    """What ``#SBATCH --signal=USR1@90`` does before a time limit, sent at once (``scancel --signal=USR1``
    signals every process of the job's steps, as SLURM's timer does): each attempt checkpoints, requeues
    its own job, and the next attempt resumes; the appended log keeps every attempt's lines. The warning
    may come at any moment of a short job (up to 60 s early): the first attempt gets it as soon as its step
    exists (its launchers still starting, before their workers exist or import torch), the second mid-run."""
    job = cluster.sbatch(rendered("--", "gpulab", *RUN), tmp_path)
    out, stopped_at = tmp_path / "run", 0
    for attempt in (1, 2):
        deadline = time.monotonic() + 120
        if attempt == 1:  # the job's step exists
            while f"{job}.0 " not in cluster.login("squeue", "-h", "-s", "-j", job, "-o", "%i ").stdout:
                assert time.monotonic() < deadline and cluster.state(job) not in ENDED, output(tmp_path, job)[
                    -3000:
                ]
                time.sleep(0.05)
        else:  # training in this attempt
            until_training(
                cluster,
                job,
                tmp_path,
                lambda after=stopped_at: max(steps_logged(out), default=0) > after,
                deadline,
            )
        r = cluster.login("scancel", "--signal=USR1", job)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 120
        while not re.search(
            rf"JobState=PENDING .*Restarts={attempt}\b",
            cluster.login("scontrol", "show", "job", "-o", job).stdout,
        ):
            assert time.monotonic() < deadline, output(tmp_path, job)[-3000:]
            time.sleep(0.2)
        # the last step this attempt logged (none where the script requeued it before gpulab trained)
        stopped_at = max(steps_logged(out), default=0)
        # SLURM holds a requeued job for about two minutes; the test, SLURM's admin here, lets it start now.
        cluster.login("scontrol", "update", f"JobId={job}", "StartTime=now")
    assert cluster.wait(job, timeout=240) == "COMPLETED", output(tmp_path, job)[-3000:]

    log = output(tmp_path, job)
    lines = log.splitlines()
    assert [line for line in lines if line.startswith(f"gpulab: job {job}, attempt ")] == [
        f"gpulab: job {job}, attempt {n}, on n1" for n in (1, 2, 3)
    ]
    # requeued twice: by gpulab after its checkpoint, or at the start (a task still in bash or the
    # interpreter's start) by the script, srun saying the task died of it
    stops = [line for line in lines if line.startswith("gpulab: stopped: SIGUSR1 at step ")]
    early = [line for line in lines if line.startswith("gpulab: SIGUSR1 came while the job was")]
    assert stops, log[-3000:]  # the mid-run one, at least
    assert len(stops + early) == 2, log[-3000:]
    assert all(f"requeueing SLURM job {job}" in line for line in stops + early), log[-3000:]
    assert all(f"requeueing SLURM job {job}: its next attempt" in s for s in stops), lines
    assert "killed by SIGUSR1" not in log, log[-3000:]  # no worker of gpulab's died of it
    assert json.loads((out / "summary.json").read_text())["steps"] == 200
    got, want = final_weights(out), uninterrupted
    assert got.keys() == want.keys() and all(got[k].equal(want[k]) for k in got)


def test_scancel_then_sigkill_resume_bit_exactly_and_every_tracker_equals_metrics_jsonl(
    cluster, tmp_path, uninterrupted
):
    """scancel (SIGTERM to every process of the step, W&B's helper not among them): one stop line, a
    checkpoint at that step, MLflow KILLED; the resubmitted job resumes; SIGKILL to every process of its
    step; then a user's own script, `srun gpulab launch -- CMD` with no node, rank or endpoint flags (the
    launchers read them from SLURM's variables), finishes the run bit-exactly as one never stopped, and
    MLflow's, W&B's and TensorBoard's loss histories each equal metrics.jsonl, step for step."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    sys.path.insert(0, str(ROOT / "tests" / "core" / "callbacks"))
    from tracker_history import assert_equal_to_jsonl, mlflow_status

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = [*RUN, "--set", "checkpoint_every=20", "--set", "trackers=[mlflow,wandb,tensorboard]",
           "--set", "tensorboard=true", "--set", f"mlflow.tracking_uri={uri}",
           "--set", "wandb.mode=offline"]  # fmt: skip
    script, out = rendered("--", "gpulab", *run), tmp_path / "run"
    job = cluster.sbatch(script, tmp_path)
    wait_for_training(cluster, job, out)
    assert cluster.login("scancel", job).returncode == 0  # SIGTERM to every process, SIGKILL after KillWait
    assert cluster.wait(job) == "CANCELLED"
    log = output(tmp_path, job)
    assert "Traceback" not in log, log[-3000:]
    assert "stopping now" not in log, log[-3000:]  # SLURM's, srun's and the launcher's SIGTERM are one
    stopped = [line for line in log.splitlines() if line.startswith("gpulab: stopped: SIGTERM at step ")]
    assert len(stopped) == 1 and mlflow_status(out, uri) == "KILLED", log[-3000:]  # rank 0 reports, once
    step = int(stopped[0].split(" at step ")[1].split(":")[0])
    assert 0 < step < 200
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step-{step:08d}"

    job = cluster.sbatch(script, tmp_path)  # resumes (--resume auto under gpulab launch)
    past = step + 20  # past a checkpoint of its own
    until_training(
        cluster, job, tmp_path, lambda: max(steps_logged(out), default=0) > past, time.monotonic() + 120
    )
    assert (
        cluster.login("scancel", "--signal=KILL", job).returncode == 0
    )  # kill -9, every process of the step
    cluster.wait(job)

    own = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output=gpulab-%j.out\n"
    own += f"srun --ntasks-per-node=1 gpulab launch -- gpulab {shlex.join(run)} --resume latest\n"
    job = cluster.sbatch(own, tmp_path)
    assert cluster.wait(job, timeout=240) == "COMPLETED", output(tmp_path, job)[-3000:]
    log = output(tmp_path, job)
    assert log.count("1 process(es) per node x 2 node(s), backend gloo, rendezvous n1:29400") == 2, log
    assert json.loads((out / "summary.json").read_text())["steps"] == 200
    got = final_weights(out)
    assert got.keys() == uninterrupted.keys() and all(got[k].equal(uninterrupted[k]) for k in got)
    assert mlflow_status(out, uri) == "FINISHED"
    assert_equal_to_jsonl(out, uri)


def test_a_node_dying_mid_run_ends_the_job_with_a_line_naming_it(cluster, tmp_path):
    run = ["train", *PREEMPT, "--max-steps", "100000", "--out", "run"]
    # --no-requeue: by default SLURM requeues a job whose node failed, and it would wait for the node.
    job = cluster.sbatch(rendered("--", "gpulab", *run), tmp_path, "--no-requeue")
    wait_for_training(cluster, job, tmp_path / "run")
    try:
        subprocess.run([str(CLUSTER), "kill-node", str(cluster.root), "n2"], check=True, timeout=30)
        state = cluster.wait(job)
    finally:  # the node comes back for whatever runs next (ReturnToService=2)
        back = subprocess.run([str(CLUSTER), "start-node", str(cluster.root), "n2"], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    log = output(tmp_path, job)
    assert state == "NODE_FAIL", log[-3000:]
    assert "srun: error: Node failure on n2" in log.splitlines(), log[-3000:]
    # gpulab's own line names the node too, not only a rank and an address
    assert any(
        line.startswith("gpulab: error: collective ") and "rank 1 on n2" in line for line in log.splitlines()
    )
    assert back.returncode == 0, back.stderr


def test_a_user_who_is_not_root_can_reach_munge(cluster):
    """munge's directory is 0755 as its own /run/munge (it was 0700: a user could not sbatch until it was
    loosened), its key still 0600; the cluster being up shows munged accepts both."""
    munge = cluster.root / "munge"
    assert munge.stat().st_mode & 0o777 == 0o755
    assert (munge / "munge.key").stat().st_mode & 0o777 == 0o600
    assert (munge / "munge.socket").stat().st_mode & 0o777 == 0o777  # munged's: anyone may connect
