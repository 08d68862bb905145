"""Preemption: a run told to stop (SIGTERM from a scheduler or Kubernetes, Ctrl-C) stops with its work saved.

``SignalWatch`` (a context manager, entered by ``gpulab train`` around a fit) turns the first SIGTERM or
SIGINT into a request, nothing more: the step under way finishes, ``StopOnSignal`` (a callback) ends the fit
at that step boundary, and the Trainer writes a checkpoint on every rank together as at any fit end. A second
signal exits at once (``os._exit(128 + signal)``: no cleanup, a save under way is left as a ``.tmp-*``
entry the next save removes). Under ``gpulab launch`` a terminal's Ctrl-C reaches only the launcher (torchrun
starts each worker in a session of its own), which forwards it once: a worker sees one signal.

Inside a SLURM job a stop request arrives several times: SLURM signals every process of the step (scancel,
preemption, the time limit), srun and ``gpulab launch`` forward their own copies. So there the signals that
arrive within ``SLURM_REPEAT_WINDOW_S`` of the first are that one request; only a later one stops at once
(found with a real cluster: rank 0 took the launcher's copy for a second signal and saved nothing).

The handlers only set a flag (and write one line with ``os.write``, which is safe in a handler); nothing
is saved from inside a handler, where the loop's state is half-way through a step.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)
SLURM_REPEAT_WINDOW_S = (
    5.0  # well inside SLURM's KillWait (30 s by default), after which SIGKILL comes anyway
)


def repeat_window(environ: Mapping[str, str] | None = None) -> float:
    """Seconds after the first signal during which more signals are copies of it: 0 outside SLURM."""
    environ = os.environ if environ is None else environ
    return SLURM_REPEAT_WINDOW_S if environ.get("SLURM_JOB_ID") else 0.0


class SignalWatch:
    """While entered (in the main thread), the first SIGTERM/SIGINT is recorded in ``signum``; signals within
    ``window_s`` of it are copies of the same request (default: ``repeat_window()``)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = SIGNALS, window_s: float | None = None) -> None:
        self.signals = signals
        self.signum: int | None = None
        self.window_s = repeat_window() if window_s is None else window_s
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            self._previous = {s: signal.signal(s, self._handle) for s in self.signals}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self._first_at = signum, time.monotonic()
            again = f"again after {self.window_s:g} s" if self.window_s else "again"
            _say(f"gpulab: {name}: finishing this step, then saving a checkpoint; {again} to stop at once")
        elif time.monotonic() - self._first_at < self.window_s:
            return  # the same request, delivered again (SLURM signals every process of the step)
        else:
            _say(f"gpulab: second {name}: stopping now, without a checkpoint")
            os._exit(128 + signum)


def _say(line: str) -> None:
    os.write(2, (line + "\n").encode())
