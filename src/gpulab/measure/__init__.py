"""What measures a run on any engine, below the engines: NVML sampling, the diagnosis of what bounds a run,
bench's harness, figures, plots and suite runner, profile and inspect reports, tune's knob groups. A torch
step's FLOPs and timers are the torch engine's (engines/torch/measure/)."""
