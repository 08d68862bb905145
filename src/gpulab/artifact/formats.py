"""The export formats: one module each (``NAME``, ``SUFFIX``, ``RUNTIME``, ``available``, ``write``,
``load``) in the engine whose models it writes (engines/<name>/formats/), found by name here through the
engine's ``export_formats`` (``gpulab.engines``: the formats its runs export to, and their modules);
another engine's run is refused in one line (``export/api.py``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulab import engines
from gpulab.errors import ConfigError, choices

# --precision's choices; engines/torch/formats/base.py's DTYPES gives each its torch dtype
PRECISIONS = ("fp32", "bf16", "fp16")


def names() -> tuple[str, ...]:
    """Every registered engine's export formats, in the registry's order."""
    return tuple(_modules())


def _modules() -> dict[str, str]:
    """format name -> the module holding it, from each engine (``Engine.export_formats``)."""
    return {f: m for name in engines.names() for f, m in engines.get(name).export_formats.items()}


def get(name: str) -> ModuleType:
    modules = _modules()
    if name not in modules:
        raise ConfigError(f"unknown export format {name!r}; valid: {choices(modules)}")
    return importlib.import_module(modules[name])


def by_suffix(path: str) -> str | None:
    """The format an artifact's file name says (longest suffix first: ``.aoti.pt2`` before ``.pt2``)."""
    mods = sorted((get(n) for n in names()), key=lambda m: -len(m.SUFFIX))
    return next((m.NAME for m in mods if path.endswith(m.SUFFIX)), None)
