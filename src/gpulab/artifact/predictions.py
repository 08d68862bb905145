"""``gpulab infer``'s predictions file: an ``.npz`` whose zip comment says gpulab wrote it. The comment is
read from the archive's last bytes (no array is loaded) and ``np.load`` ignores it; it is what lets a
later ``infer --out`` replace the file, and nothing else at that path (``artifact/ownership.py``)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

MARK = b"gpulab infer predictions"
SUFFIX = ".npz"


def write_predictions(path: Path, arrays: dict[str, Any]) -> None:
    """``arrays`` to ``path`` (which ends in .npz: NumPy would add it), then gpulab's mark."""
    np.savez(path, **arrays)
    with zipfile.ZipFile(path, "a") as archive:
        archive.comment = MARK


def is_predictions(path: Path) -> bool:
    """Whether ``path`` is a predictions file ``gpulab infer`` wrote."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.comment == MARK
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
