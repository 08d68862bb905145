"""A resume continues the run as it was set up: its recorded settings, under what this command line says.

Without this, a setting the user gave the first time and not again (``--max-steps 200``) fell back to the
recipe's default (625) on ``--resume``, and a finished run trained on, pruned its last checkpoint and
rewrote its summary. The record is the checkpoint's ``meta.json`` (``config`` and the recipe's
``options``; both engines write them, and its hash is checked against the MANIFEST first), else the run's
``summary.json``. Only settings are taken, never what decides which code runs (the recipe, the engine, a
compile backend) or where this machine runs it (the device, the directories): those stay the user's.
What the user gives explicitly still wins, and a change is checked by the resume as before
(``checkpoint.refuse``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpulab.checkpoint.io import LATEST, META
from gpulab.checkpoint.locate import AUTO
from gpulab.checkpoint.read import has_checkpoint, load_meta, locate, problem
from gpulab.config import TrainerSettings, merge
from gpulab.core.summary import SUMMARY_FILE
from gpulab.errors import CheckpointError

# Not taken from a file: code choices, this machine's placement, and the resume's own switches.
NOT_RECORDED = frozenset(
    {
        "engine",
        "compile_backend",
        "device",
        "out_dir",
        "checkpoint_dir",
        "resume",
        "overwrite",
        "force_resume",
    }
)


def with_recorded_settings(user: dict[str, Any]) -> dict[str, Any]:
    """``user`` layered over the recorded settings of the run it resumes (unchanged when not resuming or
    when there is no record)."""
    recorded = recorded_settings(user)
    return merge(recorded, user) if recorded else user


def recorded_settings(user: dict[str, Any]) -> dict[str, Any]:
    """The settings (and recipe ``options``) the run ``user`` resumes was set up with, or {}."""
    resume = user.get("resume")
    if not resume:
        return {}
    out = Path(user.get("out_dir") or f"runs/{user.get('recipe')}")
    root = Path(user["checkpoint_dir"]) if user.get("checkpoint_dir") else out / "checkpoints"
    record = _from_checkpoint(root if resume in (LATEST, AUTO) else Path(resume), resume)
    if record is None and resume in (LATEST, AUTO):
        record = _from_summary(out / SUMMARY_FILE)
    if not record:
        return {}
    config, options = record
    taken = {k: v for k, v in config.items() if k in TrainerSettings.model_fields and k not in NOT_RECORDED}
    return {**taken, **({"options": options} if isinstance(options, dict) else {})}


def _from_checkpoint(target: Path, resume: str) -> tuple[dict[str, Any], Any] | None:
    """(config, options) from the meta.json of the checkpoint the resume will start from, as ``locate``
    finds it (meta.json's hash checked; the resume verifies everything again)."""
    if resume in (LATEST, AUTO) and not has_checkpoint(target):
        return None
    try:
        found, _ = locate(target, check=lambda d: problem(d, hash_only={META}))
        if problem(found, hash_only={META}) is not None:
            return None
        meta = load_meta(found / META)
    except CheckpointError:
        return None  # the resume says what is wrong with it
    config, trajectory = meta.get("config"), meta.get("trajectory")
    if not isinstance(config, dict):
        return None  # a checkpoint from before meta.json carried its settings
    return config, trajectory.get("options") if isinstance(trajectory, dict) else None


def _from_summary(path: Path) -> tuple[dict[str, Any], Any] | None:
    try:
        config = json.loads(path.read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return None
    return (config, config.get("options")) if isinstance(config, dict) else None
