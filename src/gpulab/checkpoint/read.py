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
    REQUIRED,
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

    For a root, each ``step-*`` directory passed over because its manifest does not verify is appended to
    ``refused`` as ``(directory, why)``, so a caller can say what it fell back from. ``check`` replaces
    ``problem`` as the verification (several ranks share the hashing).
    """
    check = check or problem
    if path.name == LATEST and path.is_file():
        path = path.parent
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory or checkpoint root")
    if not _is_root(path):
        return path, False
    refused = [] if refused is None else refused
    named = read_latest(path)
    if named is not None and not verify_latest:
        return named, False
    for directory in [named] * (named is not None) + list(reversed(step_dirs(path))):
        if directory in (d for d, _ in refused):
            continue
        why = check(directory)
        if why is None:
            return directory, True
        refused.append((directory, why))
    raise CheckpointError(f"{path}: no complete checkpoint (no step-* directory whose MANIFEST verifies)")


def problem(directory: Path, hash_only: Collection[str] | None = None) -> str | None:
    """Why ``directory``'s MANIFEST does not verify (one line), or None when it does."""
    try:
        verify_manifest(directory, hash_only=hash_only)
    except CheckpointError as exc:
        return str(exc)
    return None


def read_latest(root: Path) -> Path | None:
    try:
        name = (root / LATEST).read_text().strip()
    except OSError:
        return None
    directory = root / name
    return directory if step_of(directory) is not None and directory.is_dir() else None


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
                "status": "ok" if status == "ok" else "missing" if status == "missing" else "mismatch",
            }
        )
    return rows
