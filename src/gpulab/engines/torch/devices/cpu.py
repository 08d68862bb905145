"""The CPU: tensors in host RAM, nothing queued, the resident set as its memory figure."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import sys
from typing import ClassVar

import psutil

from gpulab.engines.torch.devices.base import Accelerator
from gpulab.hardware.host_memory import reset_peak_rss


class CpuAccelerator(Accelerator):
    is_host: ClassVar[bool] = True
    # A non-blocking device->host copy may return before the data has arrived: never for a CPU target.
    non_blocking: ClassVar[bool] = False
    process_group_backend: ClassVar[str | None] = "gloo"
    fused_optimizer: ClassVar[bool] = True
    # The default only: max-autotune tunes GPU kernels, reduce-overhead replays CUDA graphs.
    compile_modes: ClassVar[tuple[str | None, ...]] = (None,)

    def name(self) -> str:
        from gpulab.hardware.devices import cpu_model

        return cpu_model()

    def reset_peak_memory(self) -> None:
        """The resident set's high-water mark, where Linux lets a process reset its own."""
        reset_peak_rss()

    def free_bytes(self) -> int | None:
        return int(psutil.virtual_memory().available)

    def release_cached_memory(self) -> None:
        gc.collect()
        _malloc_trim()


def _malloc_trim() -> None:
    """Ask glibc to return free heap pages to the OS (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)
