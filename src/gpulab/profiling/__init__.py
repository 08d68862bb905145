"""Where time and memory go: phase timers, FLOPs and MFU, NVML sampling, the profile loop, diagnosis.

``profile_loop``/``profile_recipe`` (``gpulab profile``) time and profile training steps; ``diagnose``
names what bounds a run; ``training_step_flops`` counts a step's FLOPs; ``NvmlSampler`` samples the GPU
in a background thread; ``PhaseTimer`` and ``DataWaitMeter`` are the timers.
"""

from gpulab.engines.torch.profile import ProfileOptions, ProfileResult, profile_loop, profile_recipe
from gpulab.measure.diagnosis import Diagnosis, diagnose, diagnose_run
from gpulab.measure.flops import FlopCount, Peaks, count_flops, device_peaks, training_step_flops
from gpulab.measure.sampler import NvmlSampler, SamplerSummary
from gpulab.measure.timers import DataWaitMeter, PhaseTimer, phase_timer

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
