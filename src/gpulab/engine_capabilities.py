"""What an engine offers beyond running a fit: one capability object per verb, each optional. A verb asks
``engine_registry.capability(engine, "export")`` for the object (an engine without it: one line naming the
engines that have it); the engine's module holds the object, which imports the framework only when a method
runs. Each protocol here is what its verb reads, the wording of that verb's reports among it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol


class Export(Protocol):
    """``gpulab export`` of a run of this engine (``export/api.py``, ``artifact/formats.py``)."""

    formats: Mapping[str, str]  # the formats a run of this engine exports to -> the module of each
    refusal: str  # why another engine's run cannot take one of them ("needs a TensorFlow-engine run")
    precisions: tuple[str, ...] | None  # the --precision choices; None: all
    model: str  # what it writes, as an error names it

    def run(self, path: Path, module: Any, fixed: int | None, **request: Any) -> Any:
        """Export ``path`` to ``module``'s format (``request``: out, precision, input_file, trust, output):
        an ``ExportResult``."""
