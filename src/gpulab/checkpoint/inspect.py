"""``gpulab checkpoint inspect``'s report on one checkpoint, on the storage alone: where it is, its MANIFEST's
files with their checksum status, meta.json's step, epoch and metrics, and the layout that says which engine
wrote it. What the engine's own files hold is read by that engine (``read_files``), so a TensorFlow
checkpoint is inspected without torch and a torch one without TensorFlow. Never raises for a corrupt
checkpoint: what is wrong is in ``problems``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.checkpoint.io import META, manifest_layout, read_manifest, step_of
from gpulab.checkpoint.read import file_reports, load_meta, locate, step_mismatch
from gpulab.errors import CheckpointError

# meta.json is for humans and may be edited by one: each field the report shows, with the type it must have.
_META_FIELDS = {"step": int, "epoch": int, "metrics": dict, "created": str, "versions": dict}

# (checkpoint directory, its meta.json as read, the report) -> None: the engine's files checked, problems
# and the recipe they name added to the report
FileReader = Callable[[Path, dict[str, Any], dict[str, Any]], None]


def inspect_checkpoint(path: str | os.PathLike, read_files: Callable[[str], FileReader]) -> dict[str, Any]:
    """The report on the checkpoint ``path`` names; ``read_files(layout)`` gives the reader of the engine
    that writes that layout, called only once the MANIFEST and meta.json verified."""
    report: dict[str, Any] = {"path": str(path), "valid": False, "step": None, "epoch": None}
    report.update({"metrics": {}, "created": None, "versions": {}, "files": [], "problems": []})
    report["notes"] = []  # what was passed over to get here (a `latest` not followed), one line each
    refused: list[tuple[Path, str]] = []
    try:
        directory = locate(Path(path), verify_latest=False, refused=refused)[0]
        report["path"], report["step"] = str(directory), step_of(directory)
        manifest = read_manifest(directory)
    except CheckpointError as exc:
        report["problems"].append(str(exc))
        report["notes"] = [f"{d.name} refused ({why})" for d, why in refused]
        return report
    if refused:
        report["notes"] = [f"{d.name} refused ({why})" for d, why in refused]
        report["notes"].append(f"inspected {directory.name}, the newest valid checkpoint")
    report["layout"] = manifest_layout(directory)
    report["files"] = file_reports(directory, manifest)
    report["problems"] += [f"{f['name']}: {f['status']}" for f in report["files"] if f["status"] != "ok"]
    if not report["problems"] and (mismatch := step_mismatch(directory)) is not None:
        report["problems"].append(mismatch)
    report.update({"recipe": None, "recipe_file": None})  # what it names (code, if module:function)
    meta: dict[str, Any] = {}
    try:  # JSON: safe to read even when other files are damaged, and it names step and epoch
        meta = load_meta(directory / META)
        for key, kind in _META_FIELDS.items():
            value = meta.get(key, report[key])
            if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
                report[key] = value
            else:
                report["problems"].append(f"meta.json: {key!r} is {value!r:.40}, expected {kind.__name__}")
    except CheckpointError as exc:
        report["problems"].append(str(exc))
    if not report["problems"]:  # deserialise only what the manifest vouched for
        read_files(report["layout"])(directory, meta, report)
    report["valid"] = not report["problems"]
    return report


def named_recipe(report: dict[str, Any], trajectory: Any, where: Path) -> None:
    """The recipe the checkpoint records (data: the CLI applies the trust rule to it)."""
    if isinstance(trajectory, dict) and trajectory.get("recipe"):
        report["recipe"], report["recipe_file"] = str(trajectory["recipe"]), str(where)


def recipe_in_meta(directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
    """A reader for a layout whose files only its framework reads (TensorFlow's): the MANIFEST verified
    their bytes; the recipe is meta.json's record."""
    named_recipe(report, meta.get("trajectory"), directory / META)
