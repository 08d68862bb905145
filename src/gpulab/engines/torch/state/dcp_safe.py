"""Reading torch.distributed.checkpoint (DCP) files without running code from them.

torch's ``FileSystemReader`` reads ``.metadata`` with ``pickle.load``, and its default load planner reads
the non-tensor items (an optimizer's ``param_groups``: lr, betas, ...) with
``torch.load(weights_only=False)``. Whoever can write a checkpoint directory can also rewrite its
MANIFEST, so either would let a checkpoint run code on every rank that resumes from it. Here:

- ``.metadata`` goes through an unpickler that admits only DCP's own metadata classes, ``torch.Size``,
  dtypes, layouts and paths (what torch 2.6-2.13 write), and must unpickle to a ``Metadata``;
- the byte items go through ``torch.load(weights_only=True)`` (tensors already do in torch's reader);
- every storage entry must name a file inside the checkpoint directory.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from gpulab.checkpoint.io import one_line
from gpulab.checkpoint.read import unpickler_reason
from gpulab.engines.torch import torch_private
from gpulab.engines.torch.state.layouts import DCP_METADATA
from gpulab.errors import CheckpointError
from gpulab.warning_filters import quiet

_METADATA_CLASSES = (
    "Metadata",
    "MetadataIndex",
    "StorageMeta",
    "TensorProperties",
    "TensorStorageMetadata",
    "ChunkStorageMetadata",
    "BytesStorageMetadata",
    "_MEM_FORMAT_ENCODING",
)
_PATHS = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
ALLOWED_GLOBALS = frozenset(
    {("torch.distributed.checkpoint.metadata", name) for name in _METADATA_CLASSES}
    | {("pathlib", name) for name in _PATHS}
    | {("pathlib._local", name) for name in _PATHS}  # where Python 3.13 defines them
    | {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # a lookup of torch.strided & co. by name
        ("collections", "OrderedDict"),
    }
)


class _Refused(pickle.UnpicklingError):
    """A global outside the allow-list (as opposed to bytes that do not parse)."""


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only ``ALLOWED_GLOBALS`` and torch dtypes; anything else is refused before it exists."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Refused(f"{module}.{name} is not allowed")


def read_metadata(path: Path) -> Metadata:
    """Unpickle a DCP ``.metadata`` file with the restricted unpickler; CheckpointError on anything else."""
    try:
        with open(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    except _Refused as exc:
        raise CheckpointError(
            f"{path}: refused pickle content ({one_line(exc)}); a sharded checkpoint's {DCP_METADATA} "
            "may hold only torch.distributed.checkpoint's metadata classes"
        ) from exc
    except Exception as exc:  # truncated or garbled bytes, a class called with the wrong arguments
        raise CheckpointError(f"{path}: corrupt {DCP_METADATA} ({one_line(exc)})") from exc
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{path}: expected DCP Metadata, found {type(metadata).__name__}")
    _check_storage_paths(path, metadata)
    return metadata


def _check_storage_paths(path: Path, metadata: Metadata) -> None:
    """Every shard file DCP will open must be a plain name inside the checkpoint directory."""
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise CheckpointError(f"{path}: storage entry {name!r} is not a file in the checkpoint")


def check_items(path: Path, batch_bytes: int = 256 << 20) -> Metadata:
    """What a sharded resume reads, read the same way (``read_metadata``, then every tensor and byte item
    through ``SafeFileSystemReader`` and ``SafeLoadPlanner``) into throw-away templates, a batch of about
    ``batch_bytes`` at a time; CheckpointError with resume's own line on anything it would refuse.
    ``path`` is the ``.metadata`` file. For ``checkpoint inspect``: no process group needed."""
    metadata = read_metadata(path)
    batch: dict[str, Any] = {}
    size = 0
    for fqn, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            batch[fqn] = torch.empty(item.size, dtype=item.properties.dtype)
            size += batch[fqn].nbytes
        else:  # a byte item: torch.save'd, read back with weights_only
            batch[fqn] = None
        if size >= batch_bytes:
            _load_batch(path.parent, batch)
            batch, size = {}, 0
    if batch:
        _load_batch(path.parent, batch)
    return metadata


def _load_batch(directory: Path, batch: dict[str, Any]) -> None:
    try:
        with warnings.catch_warnings():  # "assuming ... a single process": what inspect means
            quiet("torch.distributed is disabled", UserWarning)
            dcp.load(batch, storage_reader=SafeFileSystemReader(directory), planner=SafeLoadPlanner())
    except CheckpointException as exc:
        raise refused(directory, exc) from None


def refused(directory: Path, exc: CheckpointException) -> CheckpointError:
    """``DIR: sharded state refused (reason)``: the first rank's failure of a DCP load, in one line."""
    first = next(iter(exc.failures.values()), (exc, None))[0]
    reason = unpickler_reason(first) if isinstance(first, pickle.UnpicklingError) else one_line(first)
    return CheckpointError(f"{directory}: sharded state refused ({reason})")


class SafeFileSystemReader(FileSystemReader):
    """torch's ``FileSystemReader`` with ``read_metadata`` through ``read_metadata`` above."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = read_metadata(Path(self._get_metadata_path(kwargs.get("rank"))))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # as torch's own reader does
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` whose byte items are read with ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            torch_private.set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
