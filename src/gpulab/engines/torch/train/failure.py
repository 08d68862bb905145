"""The torch engine's words for the fit's failure note (``core/failure.py``): a batch's tensors with their
shapes and dtypes, and whether an error is memory running out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from gpulab.engines.torch.data.transfer import is_dataclass_instance, iter_tensors

_SHOWN = 6  # entries of a batch named; a batch with more says how many more


def describe_batch(batch: Any) -> str:
    """``x (64, 20) float32, y (64, 1) float32``: each entry of a batch with its shapes and dtypes."""
    if isinstance(batch, Mapping):
        entries = [f"{k} {_shapes(v)}" for k, v in batch.items()]
    elif is_dataclass_instance(batch):
        entries = [f"{f.name} {_shapes(getattr(batch, f.name))}" for f in dataclasses.fields(batch)]
    elif isinstance(batch, (tuple, list)):
        entries = [_shapes(item) for item in batch]
    else:
        entries = [_shapes(batch)]
    more = f", and {len(entries) - _SHOWN} more" if len(entries) > _SHOWN else ""
    return ", ".join(entries[:_SHOWN]) + more


def _shapes(value: Any) -> str:
    tensors = [value] if isinstance(value, torch.Tensor) else list(iter_tensors(value))
    if not tensors:
        return type(value).__name__
    shown = [f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in tensors[:_SHOWN]]
    return " ".join(shown) if len(tensors) == 1 else "[" + ", ".join(shown) + "]"


def is_out_of_memory(error: BaseException) -> bool:
    """A device's ``OutOfMemoryError``, or the host allocator's RuntimeError (CPU: "can't allocate")."""
    text = str(error).lower()
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
    )
