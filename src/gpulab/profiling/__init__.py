"""Where time and memory go: phase timers, FLOPs and MFU, NVML sampling, the profile loop, diagnosis.

``profile_loop``/``profile_recipe`` (``gpulab profile`` on the torch engine, engines/torch/profile.py)
time and profile training steps; ``diagnose`` names what bounds a run; ``training_step_flops`` counts a
step's FLOPs; ``NvmlSampler`` samples the GPU in a background thread; ``PhaseTimer`` and
``DataWaitMeter`` are the timers. The torch profile is imported when first asked for, so the verbs'
engine-neutral modules here (``inspect``) load no framework.
"""

from typing import Any

from gpulab.measure.diagnosis import Diagnosis, diagnose, diagnose_run
from gpulab.measure.flops import FlopCount, Peaks, count_flops, device_peaks, training_step_flops
from gpulab.measure.profile_report import ProfileOptions, ProfileResult
from gpulab.measure.sampler import NvmlSampler, SamplerSummary
from gpulab.measure.timers import DataWaitMeter, PhaseTimer, phase_timer


def __getattr__(name: str) -> Any:
    if name in ("profile_loop", "profile_recipe"):
        from gpulab.engines.torch import profile

        return getattr(profile, name)
    raise AttributeError(f"module 'gpulab.profiling' has no attribute {name!r}")


__all__ = [
    "DataWaitMeter",
    "Diagnosis",
    "FlopCount",
    "NvmlSampler",
    "Peaks",
    "PhaseTimer",
    "ProfileOptions",
    "ProfileResult",
    "SamplerSummary",
    "count_flops",
    "device_peaks",
    "diagnose",
    "diagnose_run",
    "phase_timer",
    "profile_loop",
    "profile_recipe",
    "training_step_flops",
]
