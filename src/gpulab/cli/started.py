"""When this command began (``gpulab.cli.main`` marks it): ``tune``'s budget counts from there, so the
framework's import and the settings are spent from it too."""

from __future__ import annotations

import time

_started: list[float] = []


def mark() -> None:
    """This command begins now (each ``main`` call: a process may run several, as the tests do)."""
    _started[:] = [time.monotonic()]


def command_started() -> float:
    """When this command's ``main`` began, on ``time.monotonic``'s clock (now where none runs)."""
    return _started[0] if _started else time.monotonic()
