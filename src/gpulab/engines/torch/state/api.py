"""Checkpoints that never corrupt: atomic save, verified load, and the helpers a CLI needs.

A checkpoint is a directory ``ROOT/step-{step:08d}/``::

    model.safetensors   model weights (safetensors: no code on load)
    state.pt            everything else; tensors, numbers, strings, lists, dicts, None only (weights_only)
    meta.json           human-readable: step, epoch, metrics, created, versions
    MANIFEST.json       size and sha256 of every other file; written last

``ROOT/latest`` names the newest complete checkpoint. The guarantees, and the tests that prove each one,
are listed in docs/RELIABILITY.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpulab import engine_registry as engines
from gpulab.checkpoint.inspect import inspect_checkpoint as storage_report
from gpulab.checkpoint.inspect import named_recipe, recipe_in_meta
from gpulab.checkpoint.io import (
    LATEST,
    META,
    STATE,
    TMP_PREFIX,
    WEIGHTS,
    fsync_file,
    is_complete,
    manifest_layout,
    remove_path,
    remove_stale_tmp,
    step_dir_name,
    verify_manifest,
    write_bytes_durably,
)
from gpulab.checkpoint.read import (
    check_weights_header,
    load_meta,
    load_state,
    load_weights,
    locate,
    step_dirs,
    verified,
)
from gpulab.checkpoint.save import (
    check_extra_files,
    check_save_args,
    commit_checkpoint,
    disk_full_as_error,
    meta_bytes,
    payload_bytes,
    save_weights,
)
from gpulab.engines.torch.state.contents import check_state, weights_for_file
from gpulab.engines.torch.state.layouts import DCP_METADATA, LAYOUTS
from gpulab.engines.torch.state.rng import capture_rng, restore_rng
from gpulab.errors import CheckpointError

__all__ = [
    "LoadedCheckpoint",
    "apply_model_state",
    "capture_rng",
    "export_weights",
    "inspect_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "resolve_checkpoint",
    "restore_rng",
    "save_checkpoint",
]


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint as plain data; nothing has been applied to a model or optimizer yet."""

    model_state: dict[str, torch.Tensor]
    state: dict[str, Any]
    meta: dict[str, Any]
    path: Path
    layout: str = "full"  # "sharded": the model is in torch.distributed.checkpoint shards, not model_state


def save_checkpoint(
    root: str | os.PathLike,
    *,
    step: int,
    model_state: dict[str, torch.Tensor],
    state: dict[str, Any],
    meta: dict[str, Any],
    keep_last: int | None = None,
    keep_best: tuple[str, str] | None = None,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write ``ROOT/step-{step:08d}/`` atomically, then point ``ROOT/latest`` at it, then prune.

    ``state`` must hold ``state["rng"] = capture_rng()``. ``keep_last`` keeps that many newest
    checkpoints; ``keep_best=(metric, "min"|"max")`` also keeps the best by ``meta["metrics"][metric]``.
    ``extra_files`` (name -> bytes) go beside the weights, inside the manifest (a Hugging Face
    ``config.json``). Everything is validated before the first byte is written; errors are
    ``CheckpointError``.
    """
    root = Path(root)
    check_save_args(step, state, keep_last, keep_best)
    check_state(state)
    extra_files = check_extra_files(extra_files or {})
    tensors = weights_for_file(model_state)
    meta_json = meta_bytes(step, state, meta)
    name = step_dir_name(step)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(root)
    tmp = root / f"{TMP_PREFIX}{name}-{os.getpid()}"
    needed = payload_bytes(tensors, state)
    with disk_full_as_error(root, name, needed):
        try:
            tmp.mkdir()
            save_weights(tensors, tmp / WEIGHTS)
            for file_name, data in extra_files.items():
                write_bytes_durably(tmp / file_name, data)
        except BaseException:
            remove_path(tmp)
            raise
    return commit_checkpoint(
        tmp, root, name, state, meta_json, keep_last=keep_last, keep_best=keep_best, needed=needed
    )


def load_checkpoint(path: str | os.PathLike) -> LoadedCheckpoint:
    """Verify the MANIFEST, then deserialise (safetensors; ``torch.load(weights_only=True)``).

    ``path`` is a checkpoint directory, or a root (or ``ROOT/latest``) resolved as in
    ``resolve_checkpoint(path, "latest")``.
    """
    directory, verified = locate(Path(path))
    if not verified:
        verify_manifest(directory)
    return read_verified_checkpoint(directory)


def read_verified_checkpoint(directory: Path) -> LoadedCheckpoint:
    """Deserialise a checkpoint directory whose MANIFEST the caller has just verified (several ranks may
    share that hashing); only safe formats are read either way."""
    layout = manifest_layout(directory)
    if layout not in LAYOUTS:  # another engine's checkpoint: which one, and how to resume it
        owner = engines.for_layout(layout)
        raise CheckpointError(
            f"{directory} was written by the {owner.framework} engine; resume it with --engine {owner.name}"
        )
    return LoadedCheckpoint(
        model_state=load_weights(directory / WEIGHTS) if layout == "full" else {},
        state=load_state(directory / STATE),
        meta=load_meta(directory / META),
        path=directory,
        layout=layout,
    )


def resolve_checkpoint(root_or_path: str | os.PathLike, which: str = LATEST) -> Path:
    """The checkpoint directory meant by ``root_or_path``.

    A checkpoint directory is returned as it is. For a root (or ``ROOT/latest``): the directory named by
    ``ROOT/latest`` if its manifest verifies, else the newest ``step-*`` directory whose manifest does.
    """
    if which != LATEST:
        raise CheckpointError(f"which={which!r} is not supported (valid choices: {LATEST})")
    return locate(Path(root_or_path))[0]


def list_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Every checkpoint under ``root`` whose manifest fully verifies (hashes every file), oldest first."""
    return [d for d in step_dirs(Path(root)) if is_complete(d)]


def apply_model_state(
    model: torch.nn.Module, model_state: dict[str, torch.Tensor], strict: bool = True
) -> None:
    """Load ``model_state`` into ``model`` only after key sets and shapes were checked.

    On any difference a ``CheckpointError`` lists them and the model is left untouched.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(model_state))
    unexpected = sorted(set(model_state) - set(expected))
    shapes = [
        f"{k}: checkpoint {_shape(model_state[k])} vs model {_shape(expected[k])}"
        for k in sorted(set(expected) & set(model_state))
        if _shape(model_state[k]) != _shape(expected[k])
    ]
    problems = [_listing("shape mismatch", shapes)] if shapes else []
    if strict:
        problems += [_listing("missing", missing)] if missing else []
        problems += [_listing("unexpected", unexpected)] if unexpected else []
    if problems:
        raise CheckpointError(f"model state does not fit the model: {'; '.join(problems)}")
    model.load_state_dict(model_state, strict=strict)


def inspect_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """A report on one checkpoint for humans and the CLI (``gpulab.checkpoint.inspect``), torch's files read
    as resume reads them; never raises for a corrupt checkpoint."""
    return storage_report(path, lambda layout: read_torch_files if layout in LAYOUTS else recipe_in_meta)


def read_torch_files(directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
    """The checks of ``inspect_checkpoint`` on torch's files: the safetensors header and state.pt, or for a
    sharded checkpoint everything resume reads (the DCP items), as resume reads it."""
    checks = ((check_weights_header, WEIGHTS), (load_state, STATE))
    if manifest_layout(directory) != "full":
        from gpulab.engines.torch.state.dcp_safe import check_items

        checks = ((check_items, DCP_METADATA), checks[1])
    for check, name in checks:
        try:
            found = check(directory / name)
        except CheckpointError as exc:
            report["problems"].append(str(exc))
            continue
        if name == STATE:
            named_recipe(report, found.get("trajectory"), directory / STATE)


def export_weights(path: str | os.PathLike, to_file: str | os.PathLike) -> Path:
    """Copy a verified checkpoint's ``model.safetensors`` to ``to_file`` (atomically replaced)."""
    directory = verified(Path(path))
    if manifest_layout(directory) not in LAYOUTS:
        read_verified_checkpoint(directory)  # raises: another engine's checkpoint, one line saying whose
    return copy_weights(directory, to_file)


def copy_weights(directory: Path, to_file: str | os.PathLike) -> Path:
    """``gpulab checkpoint export``: a verified torch checkpoint's ``model.safetensors`` written to
    ``to_file`` (atomically) with gpulab's mark in its header (``checkpoint/weights_file.py``); a file
    there that gpulab's mark does not name is refused, untouched."""
    from gpulab.artifact.atomic import write_atomically
    from gpulab.artifact.ownership import check_place, check_replaceable
    from gpulab.checkpoint.weights_file import is_marked, write_marked

    target = Path(to_file)
    check_replaceable(target, "a checkpoint export", is_marked, "--to")
    check_place(target, "--to")
    if manifest_layout(directory) != "full":
        raise CheckpointError(
            f"{directory} holds sharded (fsdp2) weights; convert them to one file with "
            "torch.distributed.checkpoint.format_utils.dcp_to_torch_save"
        )
    check_weights_header(directory / WEIGHTS)
    step = load_meta(directory / META).get("step")

    def write(tmp: Path) -> None:
        write_marked(directory / WEIGHTS, tmp, step)
        fsync_file(tmp)  # durable before it is renamed into place

    write_atomically(target, write, option="--to")
    return target


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def _listing(label: str, items: list[str], limit: int = 5) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return f"{label}: {', '.join(items[:limit])}{more}"
