"""A resume continues the run as it was set up: its recorded settings, under what this command line says.

Without this, a setting the user gave the first time and not again (``--max-steps 200``) fell back to the
recipe's default (625) on ``--resume``, and a finished run trained on, pruned its last checkpoint and
rewrote its summary. The record is the checkpoint's ``meta.json`` (``config`` and the recipe's
``options``; both engines write them, and its hash is checked against the MANIFEST first), else the run's
``summary.json``. Only settings are taken, never what decides which code runs (the recipe, the engine, a
compile backend), where this machine runs it (the device, the directories), or where data is sent (the
trackers, their addresses, experiment names and credentials): those stay the user's. A file can come from
anyone; a ``mlflow.tracking_uri`` planted in ``meta.json`` once made a resume upload the checkpoint to that
address. Recorded trackers the command does not name are said in one line, not adopted. What the user
gives explicitly still wins, and a change is checked by the resume as before (``checkpoint.refuse``).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpulab.checkpoint.io import LATEST, META
from gpulab.checkpoint.locate import AUTO
from gpulab.checkpoint.read import has_checkpoint, load_meta, locate, problem
from gpulab.config.layering import merge, with_defaults
from gpulab.config.schema import RunConfig, TrainerSettings
from gpulab.core.summary import SUMMARY_FILE
from gpulab.errors import CheckpointError, GpulabWarning

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
# Where a run's data goes: only this command line, its config file or the environment choose these.
DESTINATIONS = frozenset({"trackers", "mlflow", "wandb"})

U = TypeVar("U", dict[str, Any], RunConfig)


def _warn_once(line: str) -> None:
    """A warning from the first process only (every rank of a launch reads the same record); a
    GpulabWarning, so that the CLI prints it as its one ``gpulab: warning:`` line."""
    if os.environ.get("RANK", "0") == "0":
        warnings.warn(line, GpulabWarning, stacklevel=3)


def with_recorded_settings(user: U, say: Callable[[str], None] = _warn_once) -> U:
    """``user`` layered over the recorded settings of the run it resumes (unchanged when not resuming or
    when there is no record). ``say`` gets one line when the record named trackers this command omits.
    ``user``: a dict, or the settings validated already (then only the recorded ones taken are
    validated, ``with_defaults``)."""
    if isinstance(user, RunConfig):
        recorded = recorded_settings(user.model_dump(exclude_unset=True), say)
        return with_defaults(user, recorded) if recorded else user
    recorded = recorded_settings(user, say)
    return merge(recorded, user) if recorded else user


def recorded_settings(user: dict[str, Any], say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The settings (and recipe ``options``) the run ``user`` resumes was set up with, or {}: never its
    code choices, placement or data destinations."""
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
    kept_out = NOT_RECORDED | DESTINATIONS
    taken = {k: v for k, v in config.items() if k in TrainerSettings.model_fields and k not in kept_out}
    if say is not None:
        _say_trackers_not_adopted(config.get("trackers"), user.get("trackers"), say)
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


def _say_trackers_not_adopted(recorded: Any, given: Any, say: Callable[[str], None]) -> None:
    """One line when the run logged to trackers this resume will not: they are the user's to repeat."""
    if not isinstance(recorded, list):
        return
    names = sorted({str(t)[:40] for t in recorded} - set(given or []) - {"tensorboard"})
    if names:
        say(
            f"resume: the run logged to {', '.join(names)}; trackers are not taken from a run's files, so "
            f"this resume logs to none of them (repeat --set trackers=[...] and its address to continue)"
        )
