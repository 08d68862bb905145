"""Small wording helpers for what the verbs print."""

from __future__ import annotations

from typing import Any


def plural(n: int, noun: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def number(value: Any) -> str:
    """A float at six significant digits (``0.0009999999999999998`` -> ``0.001``); others as they are."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)
