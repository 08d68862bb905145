"""When this command began (``gpulab.cli.main`` marks it): ``tune``'s budget counts from there, so the
framework's import and the settings are spent from it too. A console command counts from its process's
start: the interpreter's start and gpulab's own import took 5 s of a 40 s budget on a busy 2-core machine
before ``main`` ran (``gpulab tune --budget 40`` took 45 s of wall time)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_started: list[float] = []


def mark(process: bool = False) -> None:
    """This command begins now (each ``main`` call: a process may run several, as the tests do), or, with
    ``process``, when this process started (the console command: a process of its own)."""
    now = time.monotonic()
    _started[:] = [now - (_process_age() if process else 0.0)]


def command_started() -> float:
    """When this command began, on ``time.monotonic``'s clock (now where none runs)."""
    return _started[0] if _started else time.monotonic()


def _process_age() -> float:
    """Seconds since this process started (Linux's /proc; 0 where it cannot be read)."""
    try:
        # field 22 of stat, after the command name in parentheses (which may hold spaces)
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
