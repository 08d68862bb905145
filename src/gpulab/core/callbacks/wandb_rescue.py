"""The rows W&B's helper lost when the stop signal reached it too, kept where ``wandb sync`` sends them.

``wandb_service.py`` keeps ``wandb-core`` out of the run's process tree, but a SLURM with proctrack/cgroup
signals every process of the job's cgroup, and a SIGTERM ends ``wandb-core`` before it has written what it
was handed (the segment's file then held no record, and closing the run failed 4 times). The rows are in
``metrics.jsonl``; what W&B's files hold is known (``wandb_history.py``). So the run, closing, writes the
rows W&B lacks to an offline run of the same id under ``OUT/wandb-unsent/``, from a process of its own
(this one's wandb still points at the dead helper), and says in one line how to send them. A resume sends
the same rows itself (``WandbLogger._catch_up``: ``OUT/wandb-unsent`` is not among the files it reads) and
then removes the directory, so nothing is sent twice.

    python -m gpulab.core.callbacks.wandb_rescue OUT RUN_ID PROJECT THROUGH_STEP
prints the number of rows written and the offline run's directory (nothing when none was missing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpulab.core.callbacks.tracker_replay import Acked, recorded
from gpulab.core.callbacks.wandb_history import held_steps

UNSENT = "wandb-unsent"
TIMEOUT_S = 60.0  # well inside SLURM's KillWait after the checkpoint; wandb's start takes a few seconds


def rescue(out_dir: str, run_id: str, project: str, through_step: int) -> tuple[int, str]:
    """Write the rows W&B lacks, from a process of its own: (rows written, the offline run's directory)."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}  # the dead helper's address
    done = subprocess.run(
        [sys.executable, "-m", __name__, out_dir, run_id, project, str(through_step)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env={**env, "WANDB_SILENT": "true"},
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise RuntimeError(f"could not write them ({last[:300]})")
    lines = done.stdout.split("\n")
    return (int(lines[0]), lines[1]) if lines[0].strip() else (0, "")


def forget(out_dir: str | None) -> None:
    """A resume sent the rows: the rescued copy would send them twice."""
    if out_dir and Path(out_dir, UNSENT).is_dir():
        import shutil

        shutil.rmtree(Path(out_dir, UNSENT), ignore_errors=True)


def _write(out_dir: str, run_id: str, project: str, through_step: int) -> None:
    import wandb

    acked = Acked(steps=held_steps(out_dir, run_id))
    rows = [
        (step, values)
        for step, metrics in recorded(out_dir, through_step)
        if (values := acked.missing(step, metrics))
    ]
    if not rows:
        return
    where = Path(out_dir, UNSENT)
    where.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project or None, dir=where, id=run_id, resume="allow", mode="offline",
                     settings=wandb.Settings(console="off"))  # fmt: skip
    for step, values in rows:
        run.log(values, step=step)
    run_dir = str(Path(run.dir).parent)
    run.finish()
    print(f"{len(rows)}\n{run_dir}")


if __name__ == "__main__":
    _write(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
