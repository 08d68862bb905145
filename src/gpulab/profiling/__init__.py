"""Where time and memory go: phase timers, FLOPs and MFU, NVML sampling, the profile loop, diagnosis.

``profile_loop``/``profile_recipe`` (``gpulab profile`` on the torch engine, engines/torch/profile.py)
time and profile training steps; ``diagnose`` names what bounds a run; ``training_step_flops`` counts a
step's FLOPs; ``NvmlSampler`` samples the GPU in a background thread; ``PhaseTimer`` and
``DataWaitMeter`` are the timers.

The names load on first use: the FLOP counter, the timers and the torch profile import torch, so the verbs'
engine-neutral modules here (``inspect``), what a TensorFlow profile or inspect imports, load no framework.
"""

import importlib
from typing import Any

_LAZY = {
    "Diagnosis": "gpulab.measure.diagnosis",
    "diagnose": "gpulab.measure.diagnosis",
    "diagnose_run": "gpulab.measure.diagnosis",
    "FlopCount": "gpulab.engines.torch.measure.flops",
    "Peaks": "gpulab.engines.torch.measure.flops",
    "count_flops": "gpulab.engines.torch.measure.flops",
    "device_peaks": "gpulab.engines.torch.measure.flops",
    "training_step_flops": "gpulab.engines.torch.measure.flops",
    "NvmlSampler": "gpulab.measure.sampler",
    "SamplerSummary": "gpulab.measure.sampler",
    "DataWaitMeter": "gpulab.engines.torch.measure.timers",
    "PhaseTimer": "gpulab.engines.torch.measure.timers",
    "phase_timer": "gpulab.engines.torch.measure.timers",
    "ProfileOptions": "gpulab.measure.profile_report",
    "ProfileResult": "gpulab.measure.profile_report",
    "profile_loop": "gpulab.engines.torch.profile",
    "profile_recipe": "gpulab.engines.torch.profile",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpulab.profiling' has no attribute {name!r}")
