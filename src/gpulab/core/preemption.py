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


Signals are counted by a thread, not by a Python handler: Python runs its handlers in the main thread only
between bytecodes, so while that thread waits in a long native call (a TensorFlow step, a CUDA
synchronisation) a handler is delayed until the call returns, and two signals that came meanwhile run it
once: the second would be lost. The C-level handler writes each signal's number to a pipe at once
(``signal.set_wakeup_fd``); the watch's thread reads them, records the first (and writes one line) and ends
the process on the second. Nothing is saved from there: the loop's state may be half-way through a step.

SIGUSR1 is SLURM's warning before a time limit (``#SBATCH --signal=USR1@90`` in gpulab's template, as
Lightning's SLURMEnvironment expects): the same request (checkpoint at the next step), after which rank 0
requeues the job (``requeue.py``) and the next attempt resumes from that checkpoint.

Forked children (DataLoader workers, persistent or not) inherit the pipe: they close their copies at the
fork, and the watch's thread is told to end by a byte no signal has (0), never by the end of the pipe, so a
worker still alive when the fit ends cannot keep the run from exiting (it hung after its last step).

A signal that came before the watch was entered (the process was still importing its framework, or its
launcher was signalled before it started) was recorded by ``early_signals``: the watch takes it as its first.

Engine-neutral (no framework import): the TensorFlow engine uses the same watch, callback and message.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from gpulab import early_signals
from gpulab.core.fork_inherited import close_in_children, keep_in_children
from gpulab.core.requeue import REQUEUE_SIGNAL, requeue, requeued_by_slurm
from gpulab.distributed import rank_errors
from gpulab.errors import Preempted

SIGNALS = (signal.SIGTERM, signal.SIGINT, REQUEUE_SIGNAL)
SLURM_REPEAT_WINDOW_S = (
    5.0  # well inside SLURM's KillWait (30 s by default), after which SIGKILL comes anyway
)
_STOP = b"\0"  # written by __exit__: no signal's number is 0


def _no_wakeup_in_child() -> None:
    """A forked child (a DataLoader worker) signals into no pipe of its parent (fork_inherited closes it)."""
    with contextlib.suppress(ValueError, OSError):  # not the main thread of the child
        signal.set_wakeup_fd(-1)


os.register_at_fork(after_in_child=_no_wakeup_in_child)


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
        self._pipe: tuple[int, int] | None = None
        self._wakeup = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)  # set_wakeup_fd's requirement: a handler must never block
        self._pipe = (read, write)
        close_in_children(*self._pipe)
        self._thread = threading.Thread(target=self._count, args=(read,), name="gpulab-signals", daemon=True)
        self._thread.start()
        self._wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        # The Python-level handler only keeps the default action (exit, KeyboardInterrupt) away.
        self._previous = {s: signal.signal(s, _ignore) for s in self.signals}
        early = early_signals.take()  # came while the process started (or to its launcher, before it)
        if early is not None and early in self.signals:
            self._handle(early)
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
            os.set_blocking(self._pipe[1], True)  # the stop byte must get through even if signals filled it
            os.write(self._pipe[1], _STOP)
            self._thread.join()
            keep_in_children(*self._pipe)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = self._thread = None

    def _count(self, read: int) -> None:
        while data := os.read(read, 64):
            for signum in data:
                if signum == _STOP[0]:
                    return
                if signum in self.signals:
                    self._handle(signum)

    def _handle(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.signum is None and rank_errors.peer_made_a_mistake():
            os._exit(
                128 + signum
            )  # the launcher stopping the group after a peer's one-line mistake: it says it
        if self.signum is None:
            self.signum, self._first_at = signum, time.monotonic()
            again = f"again after {self.window_s:g} s" if self.window_s else "again"
            job = os.environ.get("SLURM_JOB_ID") if signum == REQUEUE_SIGNAL else None
            then = f", then requeueing SLURM job {job}" if job else ""
            now = f"{again} to stop at once"
            _say(f"gpulab: {name}: finishing this step, then saving a checkpoint{then}; {now}")
        elif time.monotonic() - self._first_at < self.window_s:
            return  # the same request, delivered again (SLURM signals every process of the step)
        else:
            _say(f"gpulab: second {name}: stopping now, without a checkpoint")
            os._exit(128 + signum)


def _ignore(signum: int, frame: object) -> None:
    """Counted by ``SignalWatch``'s thread (from the wakeup pipe), not here."""


def _say(line: str) -> None:
    os.write(2, (line + "\n").encode())


def preemption_report(signum: int, step: int, checkpoint: Any | None) -> dict[str, Any]:
    """What a preempted fit reports (a trainer's ``extras["preempted"]``, read by ``preempted_error``)."""
    return {
        "signal": signal.Signals(signum).name,
        "step": step,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
    }


def preempted_error(
    report: dict[str, Any], rank_zero: bool, environ: Mapping[str, str] | None = None
) -> Preempted:
    """The line a preempted run ends with (from the trainer's ``extras["preempted"]``); silent off rank 0.
    After SIGUSR1 inside a SLURM job rank 0 prints it first, then requeues the job."""
    environ = os.environ if environ is None else environ
    signum = int(signal.Signals[report["signal"]])
    if not rank_zero:
        return Preempted("", signum)
    if not report["checkpoint"]:
        return Preempted(
            f"{report['signal']} at step {report['step']}: saved no checkpoint (checkpoints are off)", signum
        )
    saved = f"{report['signal']} at step {report['step']}: saved checkpoint {report['checkpoint']}"
    job = environ.get("SLURM_JOB_ID")
    if job and signum != REQUEUE_SIGNAL and requeued_by_slurm(job):  # `scontrol requeue`: SLURM's SIGTERM
        return Preempted(f"{saved}; SLURM requeued job {job}: its next attempt resumes from it", signum)
    if not job or signum != REQUEUE_SIGNAL:
        return Preempted(f"{saved}; continue with --resume latest", signum)
    # Said before the requeue: SLURM ends this attempt's processes as soon as the job is requeued.
    _say(f"gpulab: stopped: {saved}; requeueing SLURM job {job}: its next attempt resumes from it")
    failed = requeue(job)
    return Preempted(f"{failed}; resubmit the job, with --resume latest" if failed else "", signum)
