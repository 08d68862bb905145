"""``Accelerator``: what one kind of device can do, asked instead of comparing ``device.type``.

The base class is a device with no facilities of its own (no allocator statistics, no streams, no
graphs): its memory figures are the process's resident set, as for the CPU. ``cpu.py``, ``cuda.py`` and
``mps.py`` say what each kind adds; ``devices.accelerator(device)`` picks the class.
"""

from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch

from gpulab import precisions
from gpulab.errors import DeviceError
from gpulab.hardware.host_memory import peak_rss_bytes, rss_bytes, total_ram_bytes


@dataclass(frozen=True)
class MemoryStats:
    """One reading of a device's memory. ``kind`` says what the numbers count (see runtime/memory.py)."""

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


class Accelerator:
    """A device torch computes on, and the facilities gpulab uses there. Each answer is a class
    attribute or a method, so asking costs no more than the ``device.type`` test it replaces."""

    is_host: ClassVar[bool] = False  # the CPU itself: tensors in host RAM, nothing queued to wait for
    allocator_peaks: ClassVar[bool] = False  # peaks count live tensors (an allocator's statistics)
    enforces_memory_limit: ClassVar[bool] = False  # a per-process limit the allocator enforces
    streams: ClassVar[bool] = False  # side streams: a copy can overlap the step
    pin_memory: ClassVar[bool] = False  # pinned host pages make copies to it asynchronous
    non_blocking: ClassVar[bool] = True  # a copy to it may return before it is done
    cuda_graphs: ClassVar[bool] = False  # a step can be captured and replayed
    memory_snapshot: ClassVar[bool] = False  # allocation history for pytorch.org/memory_viz
    channels_last_fast: ClassVar[bool] = False  # conv nets' fastest kernels take NHWC here
    tf32_units: ClassVar[bool] = False  # fp32 matmuls run faster at "high" precision (TF32)
    data_parallel: ClassVar[bool] = False  # nn.DataParallel replicates a module over devices of this kind
    datasheet: ClassVar[bool] = False  # its part's peaks are in hardware/peaks.py's datasheet table
    profiler_activity: ClassVar[str | None] = None  # torch.profiler's activity for its kernels
    kernel_timer: ClassVar[str] = "perf_counter (device synchronised)"  # how profile times a step
    peak_description: ClassVar[str] = ""  # what an allocator peak counts, in words (allocator_peaks)
    # torch.distributed's backend for its collectives; None: one process only (no multi-process training)
    process_group_backend: ClassVar[str | None] = None
    indexed_per_rank: ClassVar[bool] = False  # each rank computes on its own device (cuda:LOCAL_RANK)
    fused_optimizer: ClassVar[bool] = False  # torch's fused Adam/AdamW/SGD kernels run here
    compile_modes: ClassVar[tuple[str | None, ...]] = ()  # torch.compile modes `gpulab tune` tries here
    timing_events: ClassVar[bool] = False  # events on its queue time phases in device time (profile)

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    @property
    def type(self) -> str:
        return self.device.type

    @property
    def autocast_device_type(self) -> str:
        """The ``device_type`` torch.autocast takes for this device."""
        return self.device.type

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.device)!r})"

    # -- identity --------------------------------------------------------------------------------------
    def canonical(self) -> torch.device:
        """The device as tensors report it (so ``tensor.device == canonical()`` holds)."""
        return self.device

    def key(self) -> str:
        """The name a per-device record (a memory limit) is kept under."""
        return str(self.canonical())

    def name(self) -> str:
        """The part's name, for reports."""
        return str(self.device)

    # -- work ------------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for queued work: needed before reading a clock, never inside the step."""

    def compute_capability(self) -> tuple[int, int] | None:
        """CUDA's (major, minor); None for a device that has none."""
        return None

    def auto_precision(self) -> tuple[str, str]:
        """``precision: auto``'s choice here and why: ``gpulab.precisions``' rule over this device's facts
        (its type alone, unless a kind says more)."""
        return precisions.auto(precisions.DeviceFacts(self.type, str(self.device)))

    def rank_device(self, local_rank: int) -> torch.device:
        """The device rank ``local_rank`` of a node computes on: its own one where ``indexed_per_rank``."""
        return torch.device(self.type, local_rank) if self.indexed_per_rank else self.device

    def ddp_device_ids(self) -> list[int] | None:
        """DistributedDataParallel's ``device_ids``: this device's index where each rank has its own."""
        return [self.device.index] if self.indexed_per_rank else None

    def timing_event(self) -> Any:
        """An event recorded now on this device's queue (``timing_events``): ``elapsed_time(later)`` in
        milliseconds and ``synchronize()``."""
        raise DeviceError(f"{self.device} has no timing events; time it with a synchronised clock")

    def rng_devices(self) -> list[Any]:
        """The devices ``torch.random.fork_rng`` must save beside the CPU's generator."""
        return []

    # -- memory ----------------------------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        """Start a new peak (where the device lets one be started)."""

    def peak_memory_bytes(self) -> int:
        """The peak since the last reset: the process's resident set where there is no allocator."""
        return peak_rss_bytes()

    def memory_stats(self, limit_bytes: int | None) -> MemoryStats:
        rss = rss_bytes()
        return MemoryStats(
            device=str(self.device),
            kind="process RSS",
            current_bytes=rss,
            peak_bytes=max(rss, self.peak_memory_bytes()),
            # The resident set is what the process holds from the OS, glibc's cache of freed blocks included.
            reserved_bytes=rss,
            total_bytes=self.capacity_bytes(),
            limit_bytes=limit_bytes,
        )

    def capacity_bytes(self) -> int:
        return total_ram_bytes()

    def free_bytes(self) -> int | None:
        """Memory free for new tensors, None where unknown."""
        return None

    def release_cached_memory(self) -> None:
        """Give memory held for reuse back (Python garbage, an allocator's cache)."""
        gc.collect()

    def set_memory_fraction(self, fraction: float) -> None:
        """Enforce a per-process limit where the allocator can (``enforces_memory_limit``)."""

    def start_memory_history(self, max_entries: int) -> None:
        raise DeviceError(
            f"a memory snapshot needs the CUDA caching allocator; {self.device} has none "
            "(use memory_stats for the process's memory)"
        )

    def memory_history(self) -> Any:
        raise DeviceError(f"{self.device} records no memory history")

    def stop_memory_history(self) -> None:
        """Stop recording (nothing was recorded where there is no allocator)."""
