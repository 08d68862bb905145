"""A job's stop signals from a gpulab process's first instruction, before any framework is imported.

SLURM may send its warning (``--signal=USR1@N``, up to 60 s early) or a SIGTERM at any moment of a job,
also while a process is still starting: importing torch or TensorFlow takes seconds, and the default action
of either signal ends the process (found on a real cluster: a 2-minute job died of its own warning, no
checkpoint, no requeue). So ``gpulab train`` and ``gpulab launch`` install ``record`` for both first thing
(``gpulab/__init__.py``), and it only writes the signal down; the run's ``SignalWatch`` takes it when it is
entered (``take``) and stops at the first step with a checkpoint, as for a signal that came during training.

A launcher's workers do not exist yet when the launcher is signalled early, so SLURM's signal never reaches
them: the launcher shares what it records through a file its workers inherit the name of
(``shared_with_workers``), and each worker's watch reads it when entered.

A second signal outside SLURM's repeat window (copies of one request, ``preemption.repeat_window``) ends the
process at once, as in a run (nothing has started that a checkpoint could keep). Nothing here imports more
than the standard library: it runs before everything else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
JOB_VERBS = ("train", "launch")  # the verbs that run a job's processes; any other verb keeps the defaults
SHARED_ENV = "GPULAB_LAUNCHER_SIGNALS"  # the file a launcher writes its early signals to
REPEAT_WINDOW_S = 5.0  # preemption.SLURM_REPEAT_WINDOW_S (that module imports more than this one may)

_first: list[tuple[int, float]] = []  # the first signal recorded and when (time.monotonic)
_taken: list[bool] = []  # a watch has taken the early signal: a later watch gets none
_shared: list[str] = []  # the file this launcher shares its signals through, while it does


def job_verb(argv: Sequence[str] | None = None, orig_argv: Sequence[str] | None = None) -> bool:
    """Whether this is ``gpulab train`` or ``gpulab launch`` (a console script or ``python -m gpulab``)."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if not argv:
        return False
    as_module = argv[0] == "-m" and any(
        a == "-m" and b == "gpulab" for a, b in zip(orig_argv, orig_argv[1:], strict=False)
    )
    if not (as_module or os.path.basename(argv[0]) == "gpulab"):
        return False
    verb = next((word for word in argv[1:] if not word.startswith("-")), None)
    return verb in JOB_VERBS


def install() -> None:
    """``record`` for SIGTERM and SIGUSR1 (main thread only: Python sets handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        signal.signal(s, record)


def install_for_job() -> None:
    """``install`` when this process is a job's (``job_verb``); a library import changes nothing."""
    if job_verb():
        install()


def record(signum: int, frame: object = None) -> None:
    """The handler: write the signal down (and to a launcher's file); a second, later one ends the process."""
    now = time.monotonic()
    if _first:
        window = REPEAT_WINDOW_S if os.environ.get("SLURM_JOB_ID") else 0.0
        if now - _first[0][1] >= window:
            name = signal.Signals(signum).name
            os.write(2, f"gpulab: second {name}: stopping now, before training started\n".encode())
            os._exit(128 + signum)
        return
    if not _first:
        _first.append((signum, now))
    _write_shared(signum)


def take() -> int | None:
    """The signal recorded before a watch was entered (here, or by this worker's launcher), once; else None.
    A signal after it (the watch's own handler restored at its exit) starts a new record."""
    if _taken:
        return None
    _taken.append(True)
    if _first:
        return _first.pop()[0]
    return _read_shared(os.environ.get(SHARED_ENV, ""))


@contextlib.contextmanager
def shared_with_workers() -> Iterator[None]:
    """While a launcher runs its workers: its early signals (and any later one it records) go to a file
    whose name the workers inherit (``SHARED_ENV``), read by each worker's watch when it is entered."""
    fd, path = tempfile.mkstemp(prefix="gpulab-signals-")
    os.close(fd)
    previous = os.environ.get(SHARED_ENV)
    os.environ[SHARED_ENV] = path
    _shared.append(path)
    if _first:
        _write_shared(_first[0][0])
    try:
        yield
    finally:
        _shared.remove(path)
        if previous is None:
            os.environ.pop(SHARED_ENV, None)
        else:
            os.environ[SHARED_ENV] = previous
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_shared(signum: int) -> None:
    for path in _shared:
        with contextlib.suppress(OSError):  # a handler must not raise
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, f"{signal.Signals(signum).name}\n".encode())
            os.close(fd)


def _read_shared(path: str) -> int | None:
    if not path:
        return None
    try:
        with open(path) as f:
            first = f.readline().strip()
    except OSError:
        return None
    return int(signal.Signals[first]) if first in signal.Signals.__members__ else None
