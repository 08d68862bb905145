"""What a finished run directory says about itself, read by every engine's export, by infer and by
``gpulab checkpoint``: its ``summary.json`` (which engine trained it, its recipe and settings), where its
checkpoints are, and the file name its artifacts take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpulab import engine_registry as engines
from gpulab.checkpoint.io import LATEST, MANIFEST
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
    """``torch`` or ``tensorflow``: what trained the run: summary.json's ``engine``; a run that failed or
    was stopped wrote none, and its checkpoints' MANIFEST layout tells instead; torch if neither does."""
    summary = run_summary(path) if path.is_dir() else None
    if summary is not None:
        return str(summary.get("engine") or DEFAULT)
    layout = checkpoint_layout_in(path) if path.is_dir() else None
    engine = engines.find(lambda e: layout in engines.checkpoint_layouts(e)) if layout else None
    return engine.name if engine else DEFAULT


def checkpoint_layout_in(path: Path) -> str | None:
    """The MANIFEST layout of the newest checkpoint at ``path`` (a checkpoint, a root of ``step-*``
    directories or a run directory); None where it holds none (its MANIFEST read as data only)."""
    candidates = [path, *sorted(path.glob("step-*"), reverse=True)]
    candidates += sorted(path.glob("checkpoints/step-*"), reverse=True)
    for directory in candidates:
        try:
            doc = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            return str(doc.get("layout") or "full")
    return None


def refuse_unfinished(path: Path) -> None:
    """A run directory with neither summary.json nor any checkpoint (a run that failed or was stopped
    before its first checkpoint): one line saying there is nothing to export, before any engine is asked."""
    if not path.is_dir() or run_summary(path) is not None:
        return
    found = [path / MANIFEST, path / LATEST, path / "checkpoints", *path.glob("step-*")]
    if any(p.exists() for p in found):
        return
    raise CheckpointError(
        f"{path}: no summary.json and no checkpoint, so nothing to export (a run that failed or was stopped "
        f"before its first checkpoint leaves neither); train it to the end: gpulab train ... --out {path} "
        "--overwrite"
    )


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
