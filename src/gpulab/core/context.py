"""``FitContext``: what a callback may know of the fit it runs in, whichever engine runs it.

The engine-neutral callbacks read this, never the trainer's own objects (a torch Runtime, a
``tf.distribute`` strategy), so one callback serves every engine without a fake device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpulab.core.state import FitState


@dataclass
class FitContext:
    engine: str
    device: str  # as the engine names it ("cuda:0", "/GPU:0", "cpu"): what FitResult.device says
    device_type: str  # "cuda", "mps" or "cpu": the hardware kind, as NVML and the diagnosis read it
    device_index: int | None  # the visible GPU's index (CUDA_VISIBLE_DEVICES order), None off a GPU
    rank: int
    world_size: int
    settings: Any  # TrainerSettings
    state: FitState
    resumed_from: Any = None  # the checkpoint's path when the fit resumed
    trajectory: dict[str, Any] = field(default_factory=dict)  # the recipe and its options, as checkpointed
    # Agrees a stop flag across ranks (read one step late, so no step waits); needed when world_size > 1.
    agree_stop: Callable[[bool], bool] | None = None

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0

    @property
    def gpu(self) -> str | None:
        """``cuda:N`` for a GPU device (what the NVML sampler reads), else None."""
        return f"cuda:{self.device_index or 0}" if self.device_type == "cuda" else None
