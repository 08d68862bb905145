"""The export formats: one module each (``NAME``, ``SUFFIX``, ``RUNTIME``, ``available``, ``write``,
``load``) in the engine whose models it writes (engines/<name>/formats/), found by name here. Which
engine's runs export to which format is the engine's ``export_formats`` (``gpulab.engines``); another
engine's run is refused in one line (``export/api.py``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulab.errors import ConfigError, choices

# name -> its module, imported by ``get`` only
_MODULES = {
    "exported": "gpulab.engines.torch.formats.exported",
    "onnx": "gpulab.engines.torch.formats.onnx",
    "torchscript": "gpulab.engines.torch.formats.torchscript",
    "aoti": "gpulab.engines.torch.formats.aoti",
    "savedmodel": "gpulab.engines.tensorflow.formats.savedmodel",
    "tflite": "gpulab.engines.tensorflow.formats.tflite",
}
FORMATS = tuple(_MODULES)
# --precision's choices; engines/torch/formats/base.py's DTYPES gives each its torch dtype
PRECISIONS = ("fp32", "bf16", "fp16")


def get(name: str) -> ModuleType:
    if name not in FORMATS:
        raise ConfigError(f"unknown export format {name!r}; valid: {choices(FORMATS)}")
    return importlib.import_module(_MODULES[name])


def by_suffix(path: str) -> str | None:
    """The format an artifact's file name says (longest suffix first: ``.aoti.pt2`` before ``.pt2``)."""
    mods = sorted((get(n) for n in FORMATS), key=lambda m: -len(m.SUFFIX))
    return next((m.NAME for m in mods if path.endswith(m.SUFFIX)), None)
