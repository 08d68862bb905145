"""Peak memory per device kind: the accelerator's allocator where there is one, the process RSS otherwise."""

from __future__ import annotations

import resource
import sys

import torch


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak bytes allocated by tensors on a GPU; on the CPU, the process's peak resident set.

    The CPU figure covers the whole process since it started (the OS offers no reset), so it includes
    Python and torch themselves: compare it between runs, not with GPU figures.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB, macOS bytes


def synchronize(device: torch.device) -> None:
    """Wait for queued device work: needed before reading a clock, never inside the step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
