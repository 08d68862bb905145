"""Preemption: a run told to stop (SIGTERM from a scheduler or Kubernetes, Ctrl-C) stops with its work saved.

``SignalWatch`` (a context manager, entered by ``gpulab train`` around a fit) turns the first SIGTERM or
SIGINT into a request, nothing more: the step under way finishes, ``StopOnSignal`` (a callback) ends the fit
at that step boundary, and the Trainer writes a checkpoint on every rank together as at any fit end. A second
signal exits at once (``os._exit(128 + signal)``: no cleanup, a save under way is left as a ``.tmp-*``
entry the next save removes). Under ``gpulab launch`` a terminal's Ctrl-C reaches only the launcher (torchrun
starts each worker in a session of its own), which forwards it once: a worker sees one signal.

Signals are counted by a thread, not by a Python handler: Python runs its handlers in the main thread only
between bytecodes, so while that thread waits in a long native call (a TensorFlow step, a CUDA
synchronisation) a handler is delayed until the call returns, and two signals that came meanwhile run it
once: the second would be lost. The C-level handler writes each signal's number to a pipe at once
(``signal.set_wakeup_fd``); the watch's thread reads them, records the first (and writes one line) and ends
the process on the second. Nothing is saved from there: the loop's state may be half-way through a step.

Engine-neutral (no framework import): the TensorFlow engine uses the same watch, callback and message.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from gpulab.errors import Preempted

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalWatch:
    """While entered (in the main thread), the first SIGTERM/SIGINT is recorded in ``signum``."""

    def __init__(self, signals: tuple[signal.Signals, ...] = SIGNALS) -> None:
        self.signals = signals
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._wakeup = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)  # set_wakeup_fd's requirement: a handler must never block
        self._pipe = (read, write)
        self._thread = threading.Thread(target=self._count, args=(read,), name="gpulab-signals", daemon=True)
        self._thread.start()
        self._wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        # The Python-level handler only keeps the default action (exit, KeyboardInterrupt) away.
        self._previous = {s: signal.signal(s, _ignore) for s in self.signals}
        return self

    def rearm(self) -> None:
        """Take the signals back from a library that installed its own handler while this watch was entered
        (TensorFlow's MultiWorkerMirroredStrategy sets a C-level SIGTERM handler that swallows the signal)."""
        for s in self._previous:
            signal.signal(s, _ignore)

    def __exit__(self, *exc_info: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
        if self._pipe is not None:
            signal.set_wakeup_fd(self._wakeup)
            os.close(self._pipe[1])  # the thread reads the end of the pipe and returns
            self._thread.join()
            os.close(self._pipe[0])
            self._pipe = self._thread = None

    def _count(self, read: int) -> None:
        while data := os.read(read, 64):
            for signum in data:
                if signum in self.signals:
                    self._handle(signum)

    def _handle(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            _say(f"gpulab: {name}: finishing this step, then saving a checkpoint; again to stop at once")
        else:
            _say(f"gpulab: second {name}: stopping now, without a checkpoint")
            os._exit(128 + signum)


def _ignore(signum: int, frame: object) -> None:
    """Counted by ``SignalWatch``'s thread (from the wakeup pipe), not here."""


def _say(line: str) -> None:
    os.write(2, (line + "\n").encode())


def preempted_error(report: dict[str, Any], rank_zero: bool) -> Preempted:
    """The line a preempted run ends with (from the trainer's ``extras["preempted"]``); silent off rank 0."""
    signum = int(signal.Signals[report["signal"]])
    if not rank_zero:
        return Preempted("", signum)
    where = (
        f"checkpoint {report['checkpoint']}; continue with --resume latest"
        if report["checkpoint"]
        else "no checkpoint (checkpoints are off)"
    )
    return Preempted(f"{report['signal']} at step {report['step']}: saved {where}", signum)
