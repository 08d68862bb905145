"""This process's host memory (Linux /proc, else getrusage/psutil): what every engine reports for a run on
the CPU, with no framework imported."""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def proc_status_bytes(field_name: str) -> int | None:
    """A ``/proc/self/status`` field in bytes (VmRSS, VmHWM), or None where there is none."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> bool:
    """VmHWM := current RSS (Linux: ``echo 5 > /proc/self/clear_refs``); False where not allowed."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int:
    """The process's peak resident set since the last ``reset_peak_rss`` (where Linux allows one), else
    since it started."""
    hwm = proc_status_bytes("VmHWM")
    if hwm is not None:
        return hwm
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB, macOS bytes


def rss_bytes() -> int:
    return int(proc_status_bytes("VmRSS") or psutil.Process().memory_info().rss)


def total_ram_bytes() -> int:
    return int(psutil.virtual_memory().total)


def host_memory_json(limit_bytes: int | None = None) -> dict[str, Any]:
    """A CPU run's memory reading, as ``runtime.memory.MemoryStats.to_json`` gives it."""
    rss, total = rss_bytes(), total_ram_bytes()
    peak = max(rss, peak_rss_bytes())
    return {
        "device": "cpu",
        "kind": "process RSS",
        "current_bytes": rss,
        "peak_bytes": peak,
        # The resident set is what the process holds from the OS, glibc's cache of freed blocks included.
        "reserved_bytes": rss,
        "total_bytes": total,
        "limit_bytes": limit_bytes,
        "peak_fraction": peak / total if total else None,
    }


def available_ram_bytes() -> int:
    """Host memory a new allocation can take now without swapping (the kernel's MemAvailable)."""
    return int(psutil.virtual_memory().available)
