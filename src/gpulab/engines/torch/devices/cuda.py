"""CUDA (and ROCm, which torch names cuda): the caching allocator's statistics and limit, streams,
pinned memory, graphs. Every call goes through ``self.cuda`` (``torch.cuda``; a test passes a fake)."""

from __future__ import annotations

import gc
from typing import Any, ClassVar

import torch

from gpulab import precisions
from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices.base import Accelerator, MemoryStats


class CudaAccelerator(Accelerator):
    allocator_peaks: ClassVar[bool] = True
    enforces_memory_limit: ClassVar[bool] = True
    streams: ClassVar[bool] = True
    pin_memory: ClassVar[bool] = True
    cuda_graphs: ClassVar[bool] = True
    memory_snapshot: ClassVar[bool] = True
    channels_last_fast: ClassVar[bool] = True
    tf32_units: ClassVar[bool] = True
    data_parallel: ClassVar[bool] = True
    datasheet: ClassVar[bool] = True
    profiler_activity: ClassVar[str | None] = "CUDA"
    kernel_timer: ClassVar[str] = "cuda events"
    peak_description: ClassVar[str] = (
        "peak bytes allocated by tensors on the GPU (torch.cuda.max_memory_allocated)"
    )

    process_group_backend: ClassVar[str | None] = "nccl"
    indexed_per_rank: ClassVar[bool] = True
    fused_optimizer: ClassVar[bool] = True
    compile_modes: ClassVar[tuple[str | None, ...]] = (None, "max-autotune", "reduce-overhead")
    timing_events: ClassVar[bool] = True

    def __init__(self, device: torch.device | str, cuda: Any = None) -> None:
        super().__init__(device)
        self.cuda = torch.cuda if cuda is None else cuda

    def canonical(self) -> torch.device:
        """A bare ``cuda`` pinned to the current device where a GPU is visible (``cuda != cuda:0``)."""
        if self.device.index is None and self.cuda.is_available():
            return torch.device("cuda", self.cuda.current_device())
        return self.device

    def index(self) -> int:
        return self.device.index if self.device.index is not None else self.cuda.current_device()

    def name(self) -> str:
        return self.cuda.get_device_name(self.device)

    def synchronize(self) -> None:
        self.cuda.synchronize(self.device)

    def rng_devices(self) -> list[Any]:
        return [self.index()]

    def reset_peak_memory(self) -> None:
        self.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_bytes(self) -> int:
        return int(self.cuda.max_memory_allocated(self.device))

    def memory_stats(self, limit_bytes: int | None) -> MemoryStats:
        index = self.index()
        return MemoryStats(
            device=f"cuda:{index}",
            kind="allocator",
            current_bytes=int(self.cuda.memory_allocated(index)),
            peak_bytes=int(self.cuda.max_memory_allocated(index)),
            reserved_bytes=int(self.cuda.memory_reserved(index)),
            total_bytes=self.capacity_bytes(),
            limit_bytes=limit_bytes,
        )

    def capacity_bytes(self) -> int:
        return int(self.cuda.get_device_properties(self.index()).total_memory)

    def free_bytes(self) -> int | None:
        return int(self.cuda.mem_get_info(self.device)[0])

    def release_cached_memory(self) -> None:
        gc.collect()
        self.cuda.empty_cache()

    def set_memory_fraction(self, fraction: float) -> None:
        self.cuda.set_per_process_memory_fraction(fraction, self.device)

    def start_memory_history(self, max_entries: int) -> None:
        torch_private.start_cuda_memory_history(self.cuda, max_entries)

    def memory_history(self) -> Any:
        return torch_private.cuda_memory_snapshot(self.cuda)

    def stop_memory_history(self) -> None:
        torch_private.stop_cuda_memory_history(self.cuda)

    def compute_capability(self) -> tuple[int, int]:
        return tuple(self.cuda.get_device_capability(self.device))

    def auto_precision(self) -> tuple[str, str]:
        """The rule over the GPU's compute capability (bf16 from Ampere on, fp16 before)."""
        facts = precisions.DeviceFacts("cuda", str(self.device), self.compute_capability())
        return precisions.auto(facts)

    def timing_event(self) -> Any:
        """On the run's device's current stream: a bare ``record()`` would use the *current* device's
        stream, which on ``cuda:N`` (N != 0) without ``set_device`` is cuda:0's, timing nothing of the run."""
        event = self.cuda.Event(enable_timing=True)
        event.record(self.cuda.current_stream(self.device))
        return event
