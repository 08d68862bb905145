"""``gpulab inspect``'s engine-neutral dispatch (``inspect``). Profiling itself is each engine's
(engines/<name>/profile.py), on the machinery in gpulab.measure (diagnosis, the NVML sampler, the report
types) and, for torch, engines/torch/measure/ (FLOPs, timers). This package imports nothing, so a
TensorFlow inspect loads no torch."""
