"""What the torch engine measures: FLOPs of a torch step (flops.py) and its device-synchronised timers
(timers.py). The engine-neutral measurement machinery is gpulab.measure."""
