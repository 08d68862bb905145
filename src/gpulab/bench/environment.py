"""The environment a bench run records in results.json: versions (the run's own), machine, devices, and
NVML's clocks/power/temperature for the GPUs when it answers."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any

from gpulab.core.summary import environment as core_environment
from gpulab.measure.results import gpu_readings

if TYPE_CHECKING:
    from gpulab.engine_capabilities import Bench


def environment(device: Any, in_process: list[Bench]) -> dict[str, Any]:
    """Versions, machine, devices, and NVML's clocks/power/temperature for the GPUs when it answers; each
    engine whose suites run in this process adds its own (its bench's ``environment``: torch's versions,
    threads and devices); an engine whose worker picks its device adds them from there."""
    from gpulab.hardware import nvml

    env = core_environment({}, None)
    for bench in in_process:
        env |= bench.environment()
    env.update(
        {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "bench_device": str(device),
        }
    )
    available, reason = nvml.nvml_status()
    env["nvml_status"] = reason
    if available:
        env["nvml"] = gpu_readings()
    return env
