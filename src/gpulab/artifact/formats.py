"""The export formats: one module each (``NAME``, ``SUFFIX``, ``RUNTIME``, ``available``, ``write``,
``load``) in the engine whose models it writes (engines/<name>/formats/), found by name here through the
engine's export capability (``engine_capabilities.Export.formats``: the formats its runs export to, and
their modules), or, at run time (a plugin's, a test's format), ``register``; another engine's run is
refused in one line (``export/api.py``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulab import engine_registry as engines
from gpulab.errors import ConfigError, choices

# --precision's choices; engines/torch/formats/base.py's DTYPES gives each its torch dtype
PRECISIONS = ("fp32", "bf16", "fp16")


def register(name: str, module: str, engine: str = engines.DEFAULT) -> None:
    """Format ``name`` exports ``engine``'s runs from now on: ``module`` is the import path of its module
    (``NAME``, ``SUFFIX``, ...), imported when the format is asked for. ``gpulab export --format NAME``,
    ``gpulab infer`` (by its ``SUFFIX``) and another engine's refusal take it from here; the built-ins are
    their engine's own ``formats``."""
    engines.capability(engines.get(engine), "export").formats[name] = module


def names() -> tuple[str, ...]:
    """Every registered engine's export formats, in the registry's order."""
    return tuple(f for name in engines.names() for f in _formats(engines.get(name)))


def _formats(engine: engines.Engine) -> dict[str, str]:
    """The formats ``engine``'s runs export to (none where it has no export)."""
    export = engines.offered(engine, "export")
    return dict(export.formats) if export else {}


def owner(name: str) -> engines.Engine:
    """The engine whose runs export to format ``name`` (its export's ``formats``: name -> its module);
    one line naming the valid formats when no engine has it."""
    engine = engines.find(lambda e: name in _formats(e))
    if engine is None:
        raise ConfigError(f"unknown export format {name!r}; valid: {choices(names())}")
    return engine


def get(name: str) -> ModuleType:
    return importlib.import_module(owner(name).export.formats[name])


def by_suffix(path: str) -> str | None:
    """The format an artifact's file name says (longest suffix first: ``.aoti.pt2`` before ``.pt2``)."""
    mods = sorted((get(n) for n in names()), key=lambda m: -len(m.SUFFIX))
    return next((m.NAME for m in mods if path.endswith(m.SUFFIX)), None)
