"""The environment a bench run records in results.json: versions (the run's own), machine, devices, and
NVML's clocks/power/temperature for the GPUs when it answers."""

from __future__ import annotations

import os
import platform
from typing import Any

from gpulab.measure.results import gpu_readings


def environment(device: Any) -> dict[str, Any]:
    """Versions, machine, devices, and NVML's clocks/power/temperature for the GPUs when it answers."""
    import torch

    from gpulab.hardware import nvml
    from gpulab.hardware.devices import discover
    from gpulab.train.run import environment as run_environment

    env = run_environment()
    env.update(
        {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "torch_threads": torch.get_num_threads(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "bench_device": str(device),
            "devices": [d.to_json() for d in discover()],
        }
    )
    available, reason = nvml.nvml_status()
    env["nvml_status"] = reason
    if available:
        env["nvml"] = gpu_readings()
    return env
