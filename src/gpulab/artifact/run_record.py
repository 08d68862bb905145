"""What a finished run directory says about itself, read by every engine's export and by infer: its
``summary.json`` (which engine trained it, its recipe and settings), and the file name its artifacts take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUMMARY_FILE = "summary.json"  # as core/summary.py writes it (not imported: keeps export's checks light)


def run_summary(path: Path) -> dict[str, Any] | None:
    """``PATH/summary.json`` as a dict, or None where the path is not a finished run directory."""
    try:
        summary = json.loads((path / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def run_engine(path: Path) -> str:
    """``torch`` or ``tensorflow``: what trained the run (summary.json's ``engine``; torch if none)."""
    summary = run_summary(path) if path.is_dir() else None
    return str((summary or {}).get("engine") or "torch")


def file_stem(recipe: str) -> str:
    """A recipe name as a file name: ``examples.cnn_case:build`` -> ``examples.cnn_case-build`` (a ``:``
    is a drive separator on Windows and a list separator in PATH-like variables)."""
    return recipe.replace(":", "-").replace("/", "-")
