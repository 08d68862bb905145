"""What measures a run, below every trainer: phase timers, FLOPs and peaks (MFU), NVML sampling, the
diagnosis of what bounds a run. The tools that use them (profile, inspect) live in ``profiling/``."""
