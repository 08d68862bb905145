"""What every engine's export leaves beside its artifact and gives back: ``PATH.export.json`` (the sidecar:
format, recipe, inputs, ...; ``gpulab infer`` reads it back) and the ``ExportResult``; the batch sizes an
artifact is traced with and checked on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLE_BATCH = 2  # torch.export specialises a size-1 dimension; 2 keeps the batch symbolic
PARITY_BATCH = 64
SIDECAR = ".export.json"


@dataclass
class ExportResult:
    artifact: Path
    parity: dict[str, Any]
    parity_path: Path
    info: dict[str, Any]


def sidecar_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + SIDECAR)


def read_sidecar(artifact: Path) -> dict[str, Any]:
    path = sidecar_path(artifact)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
