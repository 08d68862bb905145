"""The environment a bench run records in results.json: versions (the run's own), machine, devices, and
NVML's clocks/power/temperature for the GPUs when it answers."""

from __future__ import annotations

import os
import platform
from typing import Any

from gpulab.core.summary import environment as core_environment
from gpulab.measure.results import gpu_readings


def environment(device: Any, torch_side: bool = True) -> dict[str, Any]:
    """Versions, machine, devices, and NVML's clocks/power/temperature for the GPUs when it answers.
    ``torch_side``: torch's versions, threads and devices too (a TensorFlow-only bench has no torch here:
    its worker adds TensorFlow's versions and device)."""
    from gpulab.hardware import nvml

    env = _torch_environment() if torch_side else core_environment({}, None)
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


def _torch_environment() -> dict[str, Any]:
    import torch

    from gpulab.engines.torch.train.run import environment as run_environment
    from gpulab.hardware.devices import discover

    return run_environment() | {
        "torch_threads": torch.get_num_threads(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "devices": [d.to_json() for d in discover()],
    }
