"""The engines, one folder each (``torch/``, ``tensorflow/``); the registry that finds them by name is
``gpulab.engine_registry``, on config's floor below them, so this package holds engines only.

``gpulab.engines.get``, ``register`` and the registry's other names (where a plugin reached them before
the registry moved) still work for a release, with one DeprecationWarning line naming the new module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from gpulab.moved import MESSAGE, MovedWarning


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # importlib's own questions (__path__, __spec__, ...)
        raise AttributeError(name)
    registry = importlib.import_module("gpulab.engine_registry")
    if not hasattr(registry, name):
        raise AttributeError(f"module 'gpulab.engines' has no attribute {name!r}")
    warnings.warn(
        MESSAGE.format(old=f"gpulab.engines.{name}", instead=f"gpulab.engine_registry.{name}"),
        MovedWarning,
        stacklevel=2,
    )
    return getattr(registry, name)
