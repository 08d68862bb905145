"""SLURM's warning before a time limit (SIGUSR1, ``#SBATCH --signal=USR1@90``) to a real ``gpulab launch``
job, sent to the launcher and every process below it as SLURM signals every process of a step: the launcher
outlives it, the worker checkpoints at the next step, prints its stop line and requeues its job; the next
attempt (``SLURM_RESTART_COUNT=1``, no ``--resume``) resumes and ends on the weights of a run that was
never interrupted.

``scontrol`` is a script on PATH that records its arguments (the real cluster is tests/distributed/). The
launcher and the requeued attempt are processes forked from the tests' fork server (tests/forked.py), as in
test_cli_preemption.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from test_cli_preemption import RUN, assert_same_weights, final_weights, wait_for_training

JOB = "4242"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts each worker in a session of its own), from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


HERE = Path(__file__).resolve().parent  # preempt_recipe.py


def slurm_env(tmp_path: Path, **more: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": JOB, **more}


def start(server, argv: list[str], tmp_path: Path, name: str, **more: str):
    """``gpulab ARGV`` in the fake SLURM job, forked from ``server`` in a session of its own."""
    return server.start("gpulab.cli:main", argv, stderr=tmp_path / f"{name}.stderr", cwd=tmp_path,
                        session=True, path=[str(HERE)], env=slurm_env(tmp_path, **more))  # fmt: skip


@pytest.mark.slow
def test_sigusr1_checkpoints_requeues_the_job_and_the_next_attempt_resumes_bit_exact(
    tmp_path, gpulab_server, uninterrupted
):
    launch = ["launch", "--nnodes", "1", "--nproc-per-node", "1", "--", "gpulab"]
    proc = start(gpulab_server, [*launch, *RUN, "--out", "run"], tmp_path, "run")
    wait_for_training(proc, tmp_path / "run")
    for pid in [proc.pid, *descendants(proc.pid)]:  # as SLURM signals every process of a step
        os.kill(pid, signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)

    assert proc.returncode != -signal.SIGUSR1, stderr  # the launcher outlived the signal
    assert (
        "gpulab: SIGUSR1: finishing this step, then saving a checkpoint, then requeueing SLURM job" in stderr
    )
    stop = next(line for line in stderr.splitlines() if line.startswith("gpulab: stopped: SIGUSR1 at step "))
    step = int(stop.split(" at step ")[1].split(":")[0])
    assert (
        5 <= step < 200 and f"checkpoints/step-{step:08d}" in stop and f"requeueing SLURM job {JOB}" in stop
    )
    assert (tmp_path / "scontrol.log").read_text().splitlines() == [f"requeue {JOB}"]

    # The requeued attempt: the same command, no --resume; SLURM says it is a restart.
    again = start(gpulab_server, [*RUN, "--out", "run"], tmp_path, "again", SLURM_RESTART_COUNT="1")
    _, again_stderr = again.communicate(timeout=240)
    assert again.returncode == 0, again_stderr
    assert_same_weights(final_weights(tmp_path / "run"), final_weights(uninterrupted))
    assert (tmp_path / "scontrol.log").read_text().splitlines() == [f"requeue {JOB}"]  # once


def test_a_failed_requeue_is_one_line_that_says_to_resubmit(tmp_path, monkeypatch):
    from gpulab.core.preemption import preempted_error

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'Requeue of JobId=7 not allowed' >&2\nexit 1\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = {"signal": "SIGUSR1", "step": 40, "checkpoint": "run/checkpoints/step-00000040"}
    error = preempted_error(report, rank_zero=True, environ={"SLURM_JOB_ID": "7"})
    assert error.exit_code == 128 + signal.SIGUSR1
    assert str(error) == (
        "SLURM job 7 was not requeued (scontrol: Requeue of JobId=7 not allowed); "
        "resubmit the job, with --resume latest"
    )
    outside = preempted_error(report, rank_zero=True, environ={})  # not in a SLURM job: nothing to requeue
    assert str(outside).endswith(
        "saved checkpoint run/checkpoints/step-00000040; continue with --resume latest"
    )


@pytest.mark.parametrize(
    ("state", "then"),
    [
        ("REQUEUED", "SLURM requeued job 7: its next attempt resumes from it"),
        ("PENDING", "SLURM requeued job 7: its next attempt resumes from it"),
        ("CANCELLED", "continue with --resume latest"),  # scancel: the user resubmits
    ],
)
def test_after_scontrol_requeue_the_stop_line_says_slurm_resumes_the_job(tmp_path, monkeypatch, state, then):
    """``scontrol requeue`` (by a user or an admin) ends the attempt with SIGTERM: SLURM starts the job again
    and its next attempt resumes by itself, so the line must not ask for --resume latest."""
    from gpulab.core.preemption import preempted_error

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\necho 'JobId=7 JobName=gpulab JobState={state} Reason=None'\n"
    )
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = {"signal": "SIGTERM", "step": 40, "checkpoint": "run/checkpoints/step-00000040"}
    error = preempted_error(report, rank_zero=True, environ={"SLURM_JOB_ID": "7"})
    assert str(error) == f"SIGTERM at step 40: saved checkpoint run/checkpoints/step-00000040; {then}"
