"""Preemption: a run told to stop (SIGTERM from a scheduler or Kubernetes, Ctrl-C) stops with its work saved.

``SignalWatch`` (a context manager, entered by ``gpulab train`` around a fit) turns the first SIGTERM or
SIGINT into a request, nothing more: the step under way finishes, ``StopOnSignal`` (a callback) ends the fit
at that step boundary, and the Trainer writes a checkpoint on every rank together as at any fit end. A second
signal exits at once (``os._exit(128 + signal)``: no cleanup, a save under way is left as a ``.tmp-*``
entry the next save removes). Under ``gpulab launch`` a terminal's Ctrl-C reaches only the launcher (torchrun
starts each worker in a session of its own), which forwards it once: a worker sees one signal.

The handlers only set a flag (and write one line with ``os.write``, which is safe in a handler); nothing
is saved from inside a handler, where the loop's state is half-way through a step.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalWatch:
    """While entered (in the main thread), the first SIGTERM/SIGINT is recorded in ``signum``."""

    def __init__(self, signals: tuple[signal.Signals, ...] = SIGNALS) -> None:
        self.signals = signals
        self.signum: int | None = None
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
            self.signum = signum
            _say(f"gpulab: {name}: finishing this step, then saving a checkpoint; again to stop at once")
        else:
            _say(f"gpulab: second {name}: stopping now, without a checkpoint")
            os._exit(128 + signum)


def _say(line: str) -> None:
    os.write(2, (line + "\n").encode())
