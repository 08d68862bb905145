"""The TensorFlow engine's words for the fit's failure notes (``core/failure.py``, ``core/loop.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulab.checkpoint.io import one_line


def describe_batch(batch: Any) -> str:
    """``(64, 20) float32, (64,) int64``: each entry of a ``(x, y)`` batch with its shape and dtype (a dict
    of inputs by name); a batch split over replicas is named by its type."""
    if isinstance(batch, (tuple, list)):
        return ", ".join(_entry(v) for v in batch)
    return _entry(batch)


def _entry(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} {_entry(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_entry(v) for v in value) + "]"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return type(value).__name__
    return f"{tuple(shape)} {getattr(dtype, 'name', dtype)}"


def describe_error(error: BaseException) -> str:
    """A Python error while ``tf.function`` traces is a StagingError "in user code: ... KeyError: ...": its
    last line is the user's error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if lines and lines[0] == "in user code:":
        return lines[-1]
    return f"{type(error).__name__}: {one_line(error)}"


def is_out_of_memory(error: BaseException) -> bool:
    """TensorFlow's allocator running out: ``ResourceExhaustedError`` ("OOM when allocating tensor")."""
    return type(error).__name__ == "ResourceExhaustedError" or "OOM when allocating" in str(error)
