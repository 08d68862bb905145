"""The export formats: one module each (``NAME``, ``SUFFIX``, ``RUNTIME``, ``available``, ``write``,
``load``), found by name here. ``savedmodel`` and ``tflite`` belong to the TensorFlow engine, the others to
torch; a run of the other engine is refused in one line (``export/api.py``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulab.errors import ConfigError, choices

TORCH_FORMATS = ("exported", "onnx", "torchscript", "aoti")
TENSORFLOW_FORMATS = ("savedmodel", "tflite")
FORMATS = TORCH_FORMATS + TENSORFLOW_FORMATS


def get(name: str) -> ModuleType:
    if name not in FORMATS:
        raise ConfigError(f"unknown export format {name!r}; valid: {choices(FORMATS)}")
    return importlib.import_module(f"gpulab.export.formats.{name}")


def by_suffix(path: str) -> str | None:
    """The format an artifact's file name says (longest suffix first: ``.aoti.pt2`` before ``.pt2``)."""
    mods = sorted((get(n) for n in FORMATS), key=lambda m: -len(m.SUFFIX))
    return next((m.NAME for m in mods if path.endswith(m.SUFFIX)), None)
