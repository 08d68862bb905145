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
import ctypes
import ctypes.util
import gc
import pickle
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from gpulab.errors import ConfigError, DeviceError
from gpulab.hardware.host_memory import peak_rss_bytes, proc_status_bytes
from gpulab.hardware.host_memory import reset_peak_rss as _reset_cpu_high_water_mark

# Recorded limits for devices whose allocator cannot enforce one (the CPU): device string -> bytes.
_LIMITS: dict[str, int] = {}


# --------------------------------------------------------------------------------------------------------
# What the trainer has used since the start (kept as they were: the Trainer and the bench call them)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak: the allocator's on CUDA; on Linux CPUs, the resident set's high-water mark."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "cpu":
        _reset_cpu_high_water_mark()


def peak_memory_bytes(device: torch.device) -> int:
    """Peak bytes allocated by tensors on a GPU; on the CPU, the process's peak resident set.

    The CPU figure covers the whole process (it includes Python and torch themselves) since the last
    ``reset_peak_memory`` where Linux allows a reset, else since the process started.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work: needed before reading a clock, never inside the step."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# --------------------------------------------------------------------------------------------------------
# Statistics


@dataclass(frozen=True)
class MemoryStats:
    """One reading of a device's memory. ``kind`` says what the numbers count (see the module doc)."""

    device: str
    kind: str  # "allocator" (CUDA) or "process RSS" (CPU and the rest)
    current_bytes: int
    peak_bytes: int
    reserved_bytes: int
    total_bytes: int | None  # the device's capacity (RAM on the CPU)
    limit_bytes: int | None  # the per-process limit in force or recorded; None when unlimited

    @property
    def peak_fraction(self) -> float | None:
        """Peak over the limit where the allocator enforces one (CUDA), else over the capacity.

        A CPU limit is a budget for tensors (``batch_size: auto`` plans with it); the process's resident
        set cannot be held against it, since the interpreter and libraries alone take hundreds of MiB.
        """
        enforced = self.limit_bytes if self.kind == "allocator" else None
        cap = enforced or self.total_bytes
        return None if not cap else self.peak_bytes / cap

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "peak_fraction": self.peak_fraction}


def memory_stats(device: torch.device | str) -> MemoryStats:
    """Current, peak and reserved bytes of ``device`` (see the module docstring for what they count)."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return MemoryStats(
            device=f"cuda:{index}",
            kind="allocator",
            current_bytes=int(torch.cuda.memory_allocated(index)),
            peak_bytes=int(torch.cuda.max_memory_allocated(index)),
            reserved_bytes=int(torch.cuda.memory_reserved(index)),
            total_bytes=int(torch.cuda.get_device_properties(index).total_memory),
            limit_bytes=memory_limit_bytes(device),
        )
    rss = proc_status_bytes("VmRSS") or psutil.Process().memory_info().rss
    return MemoryStats(
        device=str(device),
        kind="process RSS",
        current_bytes=int(rss),
        peak_bytes=max(int(rss), peak_memory_bytes(device)),
        # The resident set is what the process holds from the OS, glibc's cache of freed blocks included.
        reserved_bytes=int(rss),
        total_bytes=int(psutil.virtual_memory().total),
        limit_bytes=memory_limit_bytes(device),
    )


def release_cached_memory(device: torch.device | str) -> None:
    """Give memory held for reuse back: Python garbage, the CUDA allocator's cache, glibc's free lists.

    Live tensors are untouched; this only lowers ``reserved`` (and lets another process have it). Call it
    after an out-of-memory error, not in a loop: refilling the cache costs device synchronisations.
    """
    device = torch.device(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "cpu":
        _malloc_trim()


# --------------------------------------------------------------------------------------------------------
# Limit


def set_memory_limit(device: torch.device | str, limit: int | float | None) -> int | None:
    """Limit this process's memory on ``device``: ``limit`` in bytes (an int) or as a fraction of the
    device's capacity (a float in (0, 1]); None removes the limit. Returns the limit in bytes.

    CUDA: enforced by the caching allocator (an allocation beyond it raises ``torch.OutOfMemoryError``).
    CPU: recorded for ``memory_limit_bytes`` and the tools that honour it; not enforced by the OS (see the
    module docstring for why ``setrlimit`` is not used).
    """
    device = torch.device(_key(torch.device(device)))  # cuda -> cuda:N: the allocator wants an index
    key = str(device)
    total = _capacity(device)
    if limit is None:
        _LIMITS.pop(key, None)
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
        return None
    limit_bytes, fraction = _limit_to_bytes(limit, total)
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    _LIMITS[key] = limit_bytes
    return limit_bytes


def memory_limit_bytes(device: torch.device | str) -> int | None:
    """The limit set by ``set_memory_limit`` for ``device``, or None."""
    return _LIMITS.get(_key(torch.device(device)))


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


def _key(device: torch.device) -> str:
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


def _capacity(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(psutil.virtual_memory().total)


# --------------------------------------------------------------------------------------------------------
# Snapshot for https://pytorch.org/memory_viz


@contextlib.contextmanager
def memory_snapshot(
    device: torch.device | str, path: str | Path, *, max_entries: int = 100_000
) -> Iterator[Path]:
    """Record every CUDA allocation (with its Python stack) inside the block, then write ``path``
    (a pickle: drag it onto https://pytorch.org/memory_viz). Recording slows allocation: profile with
    it, do not train with it.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise DeviceError(
            f"a memory snapshot needs the CUDA caching allocator; {device} has none "
            "(use memory_stats for the process's memory)"
        )
    path = Path(path)
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        yield path
        path.parent.mkdir(parents=True, exist_ok=True)
        snapshot = torch.cuda.memory._snapshot()
        with path.open("wb") as f:
            pickle.dump(snapshot, f)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


# --------------------------------------------------------------------------------------------------------
# Linux process memory


def _malloc_trim() -> None:
    """Ask glibc to return free heap pages to the OS (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)
