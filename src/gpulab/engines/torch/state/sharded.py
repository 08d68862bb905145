"""Sharded checkpoints (FSDP2): every rank writes its own shard, with the same atomicity and manifest.

The directory layout is the usual ``ROOT/step-NNNNNNNN/`` with ``state.pt``, ``meta.json`` and
``MANIFEST.json``, but the model and optimizer are ``torch.distributed.checkpoint`` (DCP) files instead
of ``model.safetensors``: ``.metadata`` plus one ``__RANK_N.distcp`` per rank. The steps:

1. rank 0 validates the arguments and creates the temporary directory ``ROOT/.tmp-step-N-PID``;
   every rank learns its name (a broadcast);
2. every rank writes its shard into it (``dcp.save``, a collective; rank 0 writes ``.metadata``);
3. rank 0 writes ``state.pt`` and ``meta.json``, then the manifest over *all* files, fsyncs, renames the
   directory into place, points ``latest`` at it and prunes -- exactly as ``save_checkpoint`` does.

A kill at any point leaves either the previous complete checkpoints or the new one, never a partial
``step-*`` directory. The checkpoint root must be on a filesystem every rank can reach. Loading never
unpickles freely: ``.metadata`` and the non-tensor items go through ``dcp_safe``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from gpulab.checkpoint.io import (
    TMP_PREFIX,
    remove_path,
    remove_stale_tmp,
    step_dir_name,
)
from gpulab.checkpoint.save import (
    check_save_args,
    commit_checkpoint,
    disk_full_as_error,
    meta_bytes,
    payload_bytes,
)
from gpulab.engines.torch.state.contents import check_state
from gpulab.engines.torch.state.dcp_safe import (
    SafeFileSystemReader,
    SafeLoadPlanner,
    read_metadata,
    refused,
)
from gpulab.engines.torch.state.layouts import DCP_METADATA


def save_sharded_checkpoint(
    root: str | os.PathLike,
    *,
    step: int,
    shards: dict[str, Any],
    state: dict[str, Any],
    meta: dict[str, Any],
    strategy: Any,
    keep_last: int | None = None,
    keep_best: tuple[str, str] | None = None,
) -> Path:
    """Write ``shards`` (this rank's ``strategy.sharded_state``) and rank 0's ``state``/``meta``.

    Called on every rank; returns the final directory on every rank.
    """
    root = Path(root)
    name = step_dir_name(step)

    def prepare() -> str:
        check_save_args(step, state, keep_last, keep_best)
        check_state(state)
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(root)
        tmp = root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        tmp.mkdir()
        return str(tmp)

    tmp = Path(strategy.broadcast(strategy.run_on_rank_zero(prepare, name=f"checkpoint {name}: prepare")))
    # A full disk on any rank fails every rank's dcp.save alike (its CheckpointException carries each
    # rank's error): each says so in one line, and rank 0 removes the temporary directory.
    with disk_full_as_error(root, name, payload_bytes(shards)):
        try:
            with strategy.collective(f"checkpoint {name}: shards (torch.distributed.checkpoint.save)"):
                dcp.save(shards, checkpoint_id=tmp)
        except BaseException:
            if strategy.is_rank_zero:
                remove_path(tmp)
            raise

    def finish() -> Path:
        return commit_checkpoint(
            tmp,
            root,
            name,
            state,
            meta_bytes(step, state, meta),
            layout="sharded",
            keep_last=keep_last,
            keep_best=keep_best,
        )

    strategy.run_on_rank_zero(finish, name=f"checkpoint {name}: manifest and rename")
    return root / name


def load_sharded_checkpoint(path: Path, model: Any, optimizer: Any, strategy: Any) -> None:
    """Read this rank's shards from the verified checkpoint directory ``path`` into model and optimizer.

    The templates come from the live (sharded) model, so the shards are resharded if needed by DCP.
    Every rank checks ``.metadata`` itself before the first collective, so a refused file fails every
    rank with the same one line instead of leaving some waiting in ``dcp.load``.
    """
    read_metadata(path / DCP_METADATA)
    shards = strategy.sharded_state(model, optimizer)
    with strategy.collective(f"checkpoint {path.name}: load shards (torch.distributed.checkpoint.load)"):
        try:
            dcp.load(shards, storage_reader=SafeFileSystemReader(path), planner=SafeLoadPlanner())
        except CheckpointException as exc:  # a BaseException that carries each rank's own error
            raise refused(path, exc) from None
    strategy.load_sharded_state(model, optimizer, shards)
