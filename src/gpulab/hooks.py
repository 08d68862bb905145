"""Test hooks: environment variables that make gpulab pause or fail on purpose, so a test can kill a save
half-way or run a rank out of memory. They are read only when ``GPULAB_TEST_HOOKS=1`` asks for them: a
user's stray ``GPULAB_CHECKPOINT_PAUSE_SECONDS=abc`` once reached every run. A bad value is one line."""

from __future__ import annotations

import os

from gpulab.errors import ConfigError

SWITCH = "GPULAB_TEST_HOOKS"


def hook(name: str) -> str | None:
    """The value of the test hook ``name``, or None when it is unset or tests did not ask for hooks."""
    if os.environ.get(SWITCH) != "1":
        return None
    return os.environ.get(name)


def hook_seconds(name: str, default: float) -> float:
    """A test hook holding seconds (a number >= 0), ``default`` where unset."""
    value = hook(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{name}={value!r}: expected seconds (a number >= 0); fix the value or unset it")
    return seconds
