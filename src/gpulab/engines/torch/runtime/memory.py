"""Memory per device: current, peak and reserved bytes, peak reset, cache release, a per-process limit,
and on CUDA a snapshot for PyTorch's memory visualiser.

Two kinds of figure, never to be compared with each other:

- CUDA: the caching allocator's own counts. ``current``/``peak`` are bytes held by live tensors,
  ``reserved`` what the allocator holds from the driver (live tensors + its cache).
- CPU (and any device without allocator statistics): the process's resident set. It covers everything
  the process holds -- Python, torch's libraries, freed memory glibc keeps for reuse -- so it is
  coarse: compare it between runs, not with GPU figures. Its peak can be reset on Linux
  (``/proc/self/clear_refs``); elsewhere it is the peak since the process started.

The per-process limit is PyTorch's counterpart of TensorFlow's ``set_memory_growth`` and
``set_logical_device_configuration(memory_limit=...)``. PyTorch's allocator already grows on demand, so
only the limit needs a setting: on CUDA it is enforced by the allocator
(``torch.cuda.set_per_process_memory_fraction``: a step that would exceed it raises
``torch.OutOfMemoryError`` like a real OOM). On the CPU it is *recorded* and honoured by the tools that
ask (``find_batch_size``): ``resource.setrlimit(RLIMIT_AS)`` would be the only OS-level alternative, and
it limits address space, not memory -- torch maps far more than it touches, so the process would die in
its own start-up long before the limit meant anything.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path

import torch

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.devices.base import MemoryStats
from gpulab.errors import ConfigError

# Recorded limits for devices whose allocator cannot enforce one (the CPU): device string -> bytes.
_LIMITS: dict[str, int] = {}


# --------------------------------------------------------------------------------------------------------
# What the trainer has used since the start (kept as they were: the Trainer and the bench call them)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak: the allocator's on CUDA; on Linux CPUs, the resident set's high-water mark."""
    accelerator(device).reset_peak_memory()


def peak_memory_bytes(device: torch.device) -> int:
    """Peak bytes allocated by tensors on a GPU; on the CPU, the process's peak resident set.

    The CPU figure covers the whole process (it includes Python and torch themselves) since the last
    ``reset_peak_memory`` where Linux allows a reset, else since the process started.
    """
    return accelerator(device).peak_memory_bytes()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work: needed before reading a clock, never inside the step."""
    accelerator(device).synchronize()


# --------------------------------------------------------------------------------------------------------
# Statistics


def memory_stats(device: torch.device | str) -> MemoryStats:
    """Current, peak and reserved bytes of ``device`` (see the module docstring for what they count)."""
    return accelerator(device).memory_stats(memory_limit_bytes(device))


def release_cached_memory(device: torch.device | str) -> None:
    """Give memory held for reuse back: Python garbage, the CUDA allocator's cache, glibc's free lists.

    Live tensors are untouched; this only lowers ``reserved`` (and lets another process have it). Call it
    after an out-of-memory error, not in a loop: refilling the cache costs device synchronisations.
    """
    accelerator(device).release_cached_memory()


# --------------------------------------------------------------------------------------------------------
# Limit


def set_memory_limit(device: torch.device | str, limit: int | float | None) -> int | None:
    """Limit this process's memory on ``device``: ``limit`` in bytes (an int) or as a fraction of the
    device's capacity (a float in (0, 1]); None removes the limit. Returns the limit in bytes.

    CUDA: enforced by the caching allocator (an allocation beyond it raises ``torch.OutOfMemoryError``).
    CPU: recorded for ``memory_limit_bytes`` and the tools that honour it; not enforced by the OS (see the
    module docstring for why ``setrlimit`` is not used).
    """
    acc = accelerator(accelerator(device).key())  # cuda -> cuda:N: the allocator wants an index
    key = acc.key()
    total = acc.capacity_bytes()
    if limit is None:
        _LIMITS.pop(key, None)
        acc.set_memory_fraction(1.0)
        return None
    limit_bytes, fraction = _limit_to_bytes(limit, total)
    acc.set_memory_fraction(fraction)
    _LIMITS[key] = limit_bytes
    return limit_bytes


def memory_limit_bytes(device: torch.device | str) -> int | None:
    """The limit set by ``set_memory_limit`` for ``device``, or None."""
    return _LIMITS.get(accelerator(device).key())


def _limit_to_bytes(limit: int | float, total: int) -> tuple[int, float]:
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        raise ConfigError(f"memory limit must be bytes (an int) or a fraction (a float), got {limit!r}")
    if isinstance(limit, float):
        if not 0.0 < limit <= 1.0:
            raise ConfigError(f"memory limit fraction must be in (0, 1], got {limit}")
        return int(limit * total), limit
    if limit <= 0:
        raise ConfigError(f"memory limit in bytes must be positive, got {limit}")
    if limit > total:
        raise ConfigError(f"memory limit {limit:,} bytes exceeds the device's {total:,} bytes")
    return int(limit), limit / total


# --------------------------------------------------------------------------------------------------------
# Snapshot for https://pytorch.org/memory_viz


@contextlib.contextmanager
def memory_snapshot(
    device: torch.device | str, path: str | Path, *, max_entries: int = 100_000
) -> Iterator[Path]:
    """Record every CUDA allocation (with its Python stack) inside the block, then write ``path``
    (a pickle: drag it onto https://pytorch.org/memory_viz). Recording slows allocation: profile with
    it, do not train with it. A device without the caching allocator is a DeviceError.
    """
    acc = accelerator(device)
    path = Path(path)
    acc.start_memory_history(max_entries)
    try:
        yield path
        path.parent.mkdir(parents=True, exist_ok=True)
        snapshot = acc.memory_history()
        with path.open("wb") as f:
            pickle.dump(snapshot, f)
    finally:
        acc.stop_memory_history()


__all__ = [
    "MemoryStats",
    "memory_limit_bytes",
    "memory_snapshot",
    "memory_stats",
    "peak_memory_bytes",
    "release_cached_memory",
    "reset_peak_memory",
    "set_memory_limit",
    "synchronize",
]
