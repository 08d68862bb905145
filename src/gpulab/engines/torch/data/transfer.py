"""Moving batches between devices: tensors nested in tuples, lists, dicts, namedtuples and dataclasses.

A batch is whatever a dataset or collate function produced; only its tensors move, every other leaf
(strings, ids, None) is returned untouched so user metadata survives the trip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from gpulab.engines.torch.devices import accelerator
from gpulab.errors import DataError

DeviceLike = str | torch.device | int


def resolve_device(device: DeviceLike) -> torch.device:
    """``torch.device`` with an explicit index for CUDA, so comparisons with ``tensor.device`` hold.

    ``torch.device("cuda") != torch.device("cuda:0")``, so a bare "cuda" is pinned to the current device
    when a GPU is visible; without one it stays bare (a policy can still be built for it).
    """
    return accelerator(device).canonical()


def map_tensors(fn: Callable[[torch.Tensor], Any], batch: Any) -> Any:
    """Apply ``fn`` to every tensor in a nested batch, keeping the containers' types."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple: positional constructor
        return type(batch)(*(map_tensors(fn, item) for item in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(fn, item) for item in batch)
    if isinstance(batch, Mapping):
        items = [(key, map_tensors(fn, value)) for key, value in batch.items()]
        try:
            return type(batch)(items)
        except TypeError:  # e.g. defaultdict wants a factory first; a plain dict keeps the data
            return dict(items)
    if is_dataclass_instance(batch):  # a collate_fn's batch object: a copy with its fields mapped
        fields = [f.name for f in dataclasses.fields(batch) if f.init]
        changes = {name: map_tensors(fn, getattr(batch, name)) for name in fields}
        return dataclasses.replace(batch, **changes)
    return batch


def is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def iter_tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested batch, depth first, in container order."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (tuple, list)):
        for item in batch:
            yield from iter_tensors(item)
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from iter_tensors(value)
    elif is_dataclass_instance(batch):
        for field in dataclasses.fields(batch):
            yield from iter_tensors(getattr(batch, field.name))


def to_device(batch: Any, device: DeviceLike, non_blocking: bool = True) -> Any:
    """Move every tensor in ``batch`` to ``device``; a tensor already there is returned as is.

    ``non_blocking`` only overlaps when the source is pinned host memory; it is dropped for a CPU
    target because a non-blocking device->host copy may return before the data has arrived.
    """
    acc = accelerator(device)
    device, non_blocking = acc.canonical(), non_blocking and acc.non_blocking
    return map_tensors(lambda t: t.to(device, non_blocking=non_blocking), batch)


def is_on_device(batch: Any, device: DeviceLike) -> bool:
    """True when every tensor in ``batch`` already lives on ``device`` (nothing to copy)."""
    device = resolve_device(device)
    return all(t.device == device for t in iter_tensors(batch))


def batch_size_of(batch: Any) -> int:
    """Leading dimension of the first tensor in ``batch`` (the number of samples it holds)."""
    if isinstance(batch, torch.Tensor) and batch.dim():  # the common case, once per step: no generator
        return batch.shape[0]
    for tensor in iter_tensors(batch):
        if tensor.dim() == 0:
            raise DataError("cannot tell the batch size: the first tensor in the batch is a scalar (0-d)")
        return tensor.shape[0]
    raise DataError(f"cannot tell the batch size: no tensor found in a batch of type {type(batch).__name__}")
