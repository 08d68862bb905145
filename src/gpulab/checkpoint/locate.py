"""Finding the checkpoint a resume starts from: verified by all ranks together, never a silent fallback.

``latest`` falls back past checkpoints whose MANIFEST does not verify, whose recorded step is not their
name's, or that lead outside the root (a symbolic link), to the newest that passes; a ``ROOT/latest`` that
is not a plain file naming one of the root's steps is not followed either. Each one
passed over is named, with why, in one warning line and in the run's summary (``refused_checkpoints``),
and under the run's own root rank 0 renames it ``NAME.refused``: no longer a ``step-*`` directory, so no
later save prunes it and a person can look at it. With several ranks the hashing is shared: each rank
hashes its own share of a checkpoint's files (and checks every size), and one gather gives every rank
every verdict, so all ranks decide alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.checkpoint.io import LATEST, read_manifest, set_aside
from gpulab.checkpoint.read import has_checkpoint, locate, problem, step_dirs
from gpulab.errors import CheckpointError, GpulabWarning

AUTO = "auto"  # resume from the newest checkpoint when there is one, else start


def choose_resume(root: Path, which: str, rank_zero: bool = True) -> str | None:
    """``auto``: ``latest`` when ``root`` holds any ``step-*`` directory, else None (start fresh); any
    directory counts, so damaged ones make ``latest`` say what is wrong rather than start over.
    ``latest`` where no checkpoint was ever written (a run stopped before its first) is a fresh start too,
    said in one line: there is nothing to lose, and nothing else would continue such a run."""
    if which == AUTO:
        return LATEST if step_dirs(root) else None
    if which == LATEST and not has_checkpoint(Path(root)):
        if rank_zero:
            warnings.warn(
                f"no checkpoint under {root} yet (the run stopped before its first): starting from step 0",
                GpulabWarning,
                stacklevel=3,
            )
        return None
    return which


def locate_for_resume(
    root: Path,
    which: str,
    runtime: Any,
    extras: dict[str, Any],
    readable: Callable[[Path], str | None] | None = None,
) -> Path:
    """The verified checkpoint directory ``which`` (``latest`` under ``root``, or a path) names; refused
    ones are recorded in ``extras`` and warned about (rank 0). ``readable``: the engine's own reading of a
    checkpoint whose MANIFEST verified (why it cannot, or None). Collective: every rank calls it."""
    refused: list[tuple[Path, str]] = []

    def check(directory: Path) -> str | None:
        why = shared_problem(directory, runtime)
        return readable(directory) if why is None and readable is not None else why

    found, verified = locate(Path(root if which == LATEST else which), refused=refused, check=check)
    if not verified and (why := check(found)) is not None:
        raise CheckpointError(why)
    if not refused:
        return found
    records = []
    for directory, why in refused:
        kept = directory
        # After the last gather above every rank has listed the directories: renaming cannot race them.
        if runtime.is_rank_zero and directory.parent == Path(root) and directory.is_dir():
            kept = set_aside(directory)
        records.append({"path": str(directory), "reason": why, "kept_as": str(kept)})
    extras["refused_checkpoints"] = records
    if runtime.is_rank_zero:
        names = "; ".join(_said(r) for r in records)
        warnings.warn(f"{names}; resuming from {found}", GpulabWarning, stacklevel=3)
    return found


def _said(record: dict[str, str]) -> str:
    """One refusal as the warning says it: a checkpoint set aside names its new name; ``latest`` (a
    pointer that was not followed) and a directory left where it was only say why."""
    name, kept = Path(record["path"]).name, Path(record["kept_as"]).name
    kept_as = f", kept as {kept}" if kept != name else ""
    return f"{name} refused ({record['reason']}){kept_as}"


def shared_problem(directory: Path, runtime: Any) -> str | None:
    """Verify a checkpoint with the ranks sharing the work: each hashes its own share of the files (and
    checks every size); one gather tells every rank every verdict, so all decide alike. Called the same
    number of times on every rank (they see the same directories)."""
    if runtime.world_size == 1:
        return problem(directory)
    try:
        names = sorted(read_manifest(directory))
        mine = problem(directory, hash_only=names[runtime.rank :: runtime.world_size])
    except CheckpointError as exc:
        mine = str(exc)
    found = [why for why in runtime.strategy.all_gather_object(mine) if why is not None]
    return found[0] if found else None
