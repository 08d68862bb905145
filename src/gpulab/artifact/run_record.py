"""What a finished run directory says about itself, read by every engine's export, by infer and by
``gpulab checkpoint``: its ``summary.json`` (which engine trained it, its recipe and settings), where its
checkpoints are, and the file name its artifacts take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpulab.engine_registry import DEFAULT
from gpulab.errors import CheckpointError

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
    return str((summary or {}).get("engine") or DEFAULT)


def file_stem(recipe: str) -> str:
    """A recipe name as a file name: ``examples.cnn_case:build`` -> ``examples.cnn_case-build`` (a ``:``
    is a drive separator on Windows and a list separator in PATH-like variables)."""
    return recipe.replace(":", "-").replace("/", "-")


def checkpoint_root(path: Path) -> tuple[Path, Path | None]:
    """(checkpoint directory or root, run directory or None) for what the user named."""
    summary = run_summary(path)
    if summary is None and not (path / "checkpoints").is_dir():
        # A checkpoint directory or a checkpoints root: inside a run (runs/x/checkpoints[/step-N]), that run
        # is the run (its export/ folder, its engine), not the working directory.
        inside = [path.parent] if path.name == "checkpoints" else []
        inside += [path.parent.parent] if path.parent.name == "checkpoints" else []
        return path, next((run for run in inside if run_summary(run) is not None), None)
    configured = (summary or {}).get("config", {}).get("checkpoint_dir")
    root = Path(configured) if configured else path / "checkpoints"
    if not root.is_dir() or not any(p.name.startswith("step-") for p in root.iterdir()):
        raise CheckpointError(
            f"{path}: run directory with no checkpoint under {root} (it was trained with checkpoints off?); "
            "train with checkpoints on (the default) or name a checkpoint directory"
        )
    return root, path


def recorded_recipe(
    trajectory: Any, where: Path, run_dir: Path | None
) -> tuple[str, dict[str, Any], str] | None:
    """(recipe, options, the file that names them): a checkpoint's ``trajectory`` (from its ``where`` file),
    else the run's summary.json; None when neither records one. Data only: nothing is imported here."""
    trajectory = trajectory if isinstance(trajectory, dict) else {}
    if trajectory.get("recipe"):
        return str(trajectory["recipe"]), dict(trajectory.get("options") or {}), str(where)
    summary = run_summary(run_dir) if run_dir else None
    if summary and summary.get("recipe"):
        options = dict(summary.get("config", {}).get("options") or {})
        return str(summary["recipe"]), options, str(run_dir / SUMMARY_FILE)
    return None
