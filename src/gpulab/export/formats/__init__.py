"""The export formats: one module each (``NAME``, ``SUFFIX``, ``RUNTIME``, ``available``, ``write``,
``load``), found by name here. Which engine's runs export to which format is the engine's
``export_formats`` (``gpulab.engines``); another engine's run is refused in one line (``export/api.py``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulab.errors import ConfigError, choices

FORMATS = ("exported", "onnx", "torchscript", "aoti", "savedmodel", "tflite")
PRECISIONS = ("fp32", "bf16", "fp16")  # --precision's choices; base.DTYPES gives each its torch dtype


def get(name: str) -> ModuleType:
    if name not in FORMATS:
        raise ConfigError(f"unknown export format {name!r}; valid: {choices(FORMATS)}")
    return importlib.import_module(f"gpulab.export.formats.{name}")


def by_suffix(path: str) -> str | None:
    """The format an artifact's file name says (longest suffix first: ``.aoti.pt2`` before ``.pt2``)."""
    mods = sorted((get(n) for n in FORMATS), key=lambda m: -len(m.SUFFIX))
    return next((m.NAME for m in mods if path.endswith(m.SUFFIX)), None)
