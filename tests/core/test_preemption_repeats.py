"""Inside a SLURM job one stop request reaches a worker several times (SLURM signals every process of the
step, and srun and the launcher forward their own copies): those copies are one request, not "again"."""

from __future__ import annotations

import os
import signal

from gpulab.core.preemption import SLURM_REPEAT_WINDOW_S, SignalWatch, repeat_window


def test_signals_are_copies_of_one_request_only_inside_a_slurm_job():
    assert repeat_window({"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"}) == SLURM_REPEAT_WINDOW_S
    assert repeat_window({}) == 0.0


def test_copies_within_the_window_leave_one_request_and_the_process_running(capfd):
    with SignalWatch(window_s=60.0) as watch:
        for _ in range(3):  # scancel: SLURM's own, srun's, the launcher's
            os.kill(os.getpid(), signal.SIGTERM)
    assert watch.signum == signal.SIGTERM  # and this process was not ended by a "second" signal
    lines = capfd.readouterr().err.splitlines()
    assert lines == [
        "gpulab: SIGTERM: finishing this step, then saving a checkpoint; again after 60 s to stop at once"
    ]
