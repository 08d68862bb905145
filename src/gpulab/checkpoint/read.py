"""The reading half of ``api.py``: finding a checkpoint and deserialising its files safely.

Callers verify the MANIFEST first; these functions only ever deserialise with safetensors, JSON and
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import safe_open

from gpulab.checkpoint.io import (
    LATEST,
    MANIFEST,
    META,
    REQUIRED,
    STEP_DIR,
    UnreadableCheckpoint,
    file_status,
    one_line,
    step_of,
    verify_manifest,
)
from gpulab.errors import CheckpointError

if TYPE_CHECKING:
    import torch


def step_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [(step_of(p), p) for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return [p for _, p in sorted(found)]


def has_checkpoint(root: Path) -> bool:
    """Whether ``root`` holds a checkpoint, complete or not (``latest`` or a ``step-*`` directory): a run
    stopped before its first one has none, and ``--resume latest`` starts it from step 0."""
    return (root / LATEST).exists() or bool(step_dirs(root))


def is_checkpoint_dir(path: Path) -> bool:
    """Whether ``path`` is one checkpoint (a ``step-*`` directory or one holding checkpoint files)."""
    return path.is_dir() and not _is_root(path)


def check_names_checkpoint(path: Path, fix: str) -> None:
    """One line (``CheckpointError``) unless ``path`` is a checkpoint, a ``latest`` file, or a folder that
    holds any checkpoint, complete or not (which the reader then verifies or refuses by name)."""
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{path}: no such checkpoint directory or checkpoint root")
    if not path.is_dir() and path.name != LATEST:
        raise CheckpointError(f"{path}: a file, not a checkpoint; {fix}")
    if path.is_dir() and not is_checkpoint_dir(path) and not has_checkpoint(path):
        raise CheckpointError(f"{path}: holds no checkpoint (no step-* folder, no latest); {fix}")


def _is_root(path: Path) -> bool:
    """A directory is a checkpoint if it is named ``step-*`` or holds any checkpoint file; else a root."""
    if step_of(path) is not None:
        return False
    return not any((path / name).exists() for name in (MANIFEST, *REQUIRED))


def locate(
    path: Path,
    *,
    verify_latest: bool = True,
    refused: list[tuple[Path, str]] | None = None,
    check: Callable[[Path], str | None] | None = None,
) -> tuple[Path, bool]:
    """(checkpoint dir, whether it was already fully verified) for a dir, a root or ``ROOT/latest``.

    For a root, each ``step-*`` directory passed over because its manifest does not verify, or because it
    leads outside the root, is appended to ``refused`` as ``(directory, why)``, and so is ``ROOT/latest``
    when it is not followed (a symlink, a name that is no ``step-*`` of the root, a missing step), so a
    caller can say what it fell back from. ``check`` replaces ``problem`` as the verification (several
    ranks share the hashing).
    """
    check = check or problem
    if path.name == LATEST and path.is_file():
        path = path.parent
    if not path.is_dir():
        what = "a file, not a" if path.exists() else "no such"
        raise CheckpointError(f"{path}: {what} checkpoint directory or checkpoint root")
    if not _is_root(path):
        return path, False
    refused = [] if refused is None else refused
    named, why = latest_pointer(path)
    if why is not None and all(d.name != LATEST for d, _ in refused):
        refused.append((path / LATEST, why))
    # Which step it is, not whether its files are whole: a damaged `latest` is reported or refused by
    # the caller (verify_latest=False), never swapped silently for an older one.
    if named is not None and (away := outside(path, named) or step_mismatch(named, unreadable_ok=True)):
        refused.append((named, away))
        named = None
    if named is not None and not verify_latest:
        return named, False
    for directory in [named] * (named is not None) + list(reversed(step_dirs(path))):
        if directory in (d for d, _ in refused):
            continue
        why = outside(path, directory) or check(directory)
        if why is None:
            return directory, True
        refused.append((directory, why))
    if not step_dirs(path):  # a run stopped before its first checkpoint, or trained with them off
        raise CheckpointError(
            f"{path}: no complete checkpoint (no step-* directory): this run wrote none; train it with "
            "checkpoints on (the default, or --set checkpoints=true) or give a run that has one"
        )
    raise CheckpointError(f"{path}: no complete checkpoint (no step-* directory whose MANIFEST verifies)")


def verified(path: Path) -> Path:
    """The checkpoint ``path`` means, its MANIFEST verified: the one ``ROOT/latest`` names for a root, and
    refused if it does not verify, never silently swapped for an older step (``checkpoint export`` once
    copied the previous step's weights over a flipped byte). A ``latest`` that is not followed (a link, a
    missing step) falls back to the newest verified step, said as a warning."""
    import warnings

    from gpulab.errors import GpulabWarning

    refused: list[tuple[Path, str]] = []
    directory, checked = locate(path, verify_latest=False, refused=refused)
    if refused:
        passed = "; ".join(f"{d.name} refused ({why})" for d, why in refused)
        warnings.warn(
            f"{passed}; using {directory}, the newest valid checkpoint", GpulabWarning, stacklevel=2
        )
    if not checked:
        verify_manifest(directory)
    return directory


def problem(directory: Path, hash_only: Collection[str] | None = None) -> str | None:
    """Why ``directory``'s MANIFEST does not verify (one line), or None when it does."""
    try:
        verify_manifest(directory, hash_only=hash_only)
    except UnreadableCheckpoint:
        raise  # not damaged: said, never passed over for an older step
    except CheckpointError as exc:
        return str(exc)
    return step_mismatch(directory)


def step_mismatch(directory: Path, unreadable_ok: bool = False) -> str | None:
    """Why the step ``directory``'s meta.json records is not the step its name says, or None. A copy of
    step 20 named step-00000030 (MANIFEST and all) would otherwise resume as step 30's. An unreadable
    meta.json is a line too, unless ``unreadable_ok`` (the verification that follows reports it)."""
    named = step_of(directory)
    if named is None:  # a checkpoint directory under another name: nothing to compare with
        return None
    try:
        meta = load_meta(directory / META)
    except CheckpointError as exc:
        return None if unreadable_ok else str(exc)
    recorded = [("step", meta.get("step"))]
    progress = meta.get("progress")
    if isinstance(progress, dict) and "global_step" in progress:  # the TensorFlow engine's progress
        recorded.append(("progress.global_step", progress["global_step"]))
    for where, value in recorded:
        if type(value) is not int or value != named:
            return f"{directory / META}: records {where} {value!r:.40}, but the directory is step {named}"
    return None


def latest_pointer(root: Path) -> tuple[Path | None, str | None]:
    """(the checkpoint ``ROOT/latest`` names, None), or (None, why it is not followed), or (None, None)
    where there is no ``latest``. gpulab writes it as a plain file holding one ``step-NNNNNNNN`` name of
    this root: anything else (a symlink, a path, a step that is not there) is data it does not follow."""
    pointer = root / LATEST
    if not pointer.is_symlink() and not pointer.exists():
        return None, None
    if pointer.is_symlink():
        return None, f"{pointer} is a symbolic link (gpulab writes a file naming a step of {root})"
    try:
        name = pointer.read_text(errors="replace").strip()
    except OSError as exc:
        return None, f"{pointer}: unreadable ({one_line(exc)})"
    if not STEP_DIR.match(name):
        return None, f"{pointer} names {name[:80]!r}, which is not a step-NNNNNNNN directory of {root}"
    directory = root / name
    if not directory.is_dir():
        return None, f"{pointer} names {name}, which does not exist"
    return directory, None


def outside(root: Path, directory: Path) -> str | None:
    """Why ``directory`` (a ``step-*`` entry of ``root``) is not really inside ``root``, or None: a
    symbolic link that resolves elsewhere would resume, inspect or export another run's files."""
    try:
        if directory.resolve().parent == root.resolve():
            return None
        target = directory.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        return f"{directory}: unresolvable ({one_line(exc)})"
    return f"{directory} leads outside {root} (to {target})"


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # torch's side: an engine without torch never reads weights here

    try:
        return load_file(str(path), device="cpu")
    except Exception as exc:  # SafetensorError and friends: the file does not parse
        raise CheckpointError(f"{path}: corrupt or truncated safetensors ({one_line(exc)})") from exc


def check_weights_header(path: Path) -> None:
    try:
        with safe_open(str(path), framework="pt") as handle:
            handle.keys()
    except Exception as exc:
        raise CheckpointError(f"{path}: corrupt or truncated safetensors ({one_line(exc)})") from exc


def load_state(path: Path) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused pickle content ({unpickler_reason(exc)}); "
            "state.pt may hold only tensors, numbers, strings, lists, dicts and None"
        ) from exc
    except Exception as exc:  # zip/EOF errors from a damaged file
        raise CheckpointError(f"{path}: corrupt state file ({one_line(exc)})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a dict, found {type(state).__name__}")
    return state


def unpickler_reason(exc: BaseException) -> str:
    """torch's message wraps the reason ("Trying to load unsupported GLOBAL posix.system ...") in advice to
    disable weights_only and a link: keep only the reason."""
    text = str(exc)
    marker = "WeightsUnpickler error:"  # older torch: the reason follows this marker
    if marker in text:
        text = text.split(marker, 1)[1].split(" Please use", 1)[0]
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    reasons = [p for p in paragraphs if not p.startswith(boilerplate)] or paragraphs
    return one_line(Exception(" ".join(" ".join(reasons).split())))


def load_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable meta ({one_line(exc)})") from exc
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return meta


# file_status's words -> the report's column (an unreadable file is no mismatch: its bytes were not read)
_STATUS = {"ok": "ok", "missing": "missing", "unreadable": "unreadable"}


def file_reports(directory: Path, manifest: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name, record in manifest.items():
        status = file_status(directory, name, record)
        path = directory / name
        rows.append(
            {
                "name": name,
                "size": path.stat().st_size if path.is_file() else None,
                "expected_size": record["size"],
                "sha256": record["sha256"],
                "status": _STATUS.get(status.split(" (")[0], "mismatch"),
            }
        )
    return rows
