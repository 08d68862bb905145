"""Runtime = device x Precision x Strategy: the low-level way to run a training loop anywhere.

The names load on first use: the data loaders ask this package's device seam (``devices``) and the
Runtime moves batches with the loaders' ``to_device``, so importing the Runtime here would be a cycle.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "PRECISIONS": "precision",
    "Precision": "precision",
    "resolve_precision": "precision",
    "Runtime": "runtime",
    "seed_everything": "seed",
    "STRATEGIES": "strategies",
    "Single": "strategies",
    "Strategy": "strategies",
    "resolve_strategy": "strategies",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "Precision",
    "Runtime",
    "Single",
    "Strategy",
    "resolve_precision",
    "resolve_strategy",
    "seed_everything",
]
