"""``scontrol requeue $SLURM_JOB_ID``: a job warned of its time limit puts itself back in the queue.

The warning is SIGUSR1 (``#SBATCH --signal=USR1@90`` in gpulab's sbatch template, with ``--requeue`` and
``--open-mode=append``, as Lightning's SLURMEnvironment expects): gpulab checkpoints at the next step
(``preemption.py``), then rank 0 requeues the job. SLURM ends this attempt and starts the batch script
again; its ``gpulab launch`` (or a ``gpulab train`` that sees ``SLURM_RESTART_COUNT``) resumes with
``--resume auto``.
"""

from __future__ import annotations

import signal
import subprocess

REQUEUE_SIGNAL = signal.SIGUSR1
TIMEOUT_S = 60.0  # slurmctld answers in well under a second; a hung one must not hold the job's last seconds


def requeue(job: str) -> str:
    """Requeue SLURM job ``job``; "" when done, else why not (one line)."""
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"SLURM job {job} was not requeued ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[0]
        return f"SLURM job {job} was not requeued (scontrol: {said})"
    return ""


# The states of a job SLURM is putting back in its queue (``scontrol requeue``, or a node failure with
# ``--requeue``): its SIGTERM is a requeue's, and the next attempt resumes by itself.
REQUEUED_STATES = ("REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PENDING")


def requeued_by_slurm(job: str) -> bool:
    """Whether SLURM is requeueing job ``job`` (asked of ``scontrol``; False when it cannot say)."""
    try:
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    state = next((w.split("=", 1)[1] for w in done.stdout.split() if w.startswith("JobState=")), "")
    return done.returncode == 0 and state in REQUEUED_STATES
