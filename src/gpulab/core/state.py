"""What the Trainer knows while it runs, and what ``fit`` returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FitState:
    """Progress of a fit. ``metrics`` holds the latest *read* values (refreshed every ``log_every`` steps)."""

    epoch: int = 0
    global_step: int = 0  # optimizer steps taken
    batch_in_epoch: int = 0  # micro-batches consumed in the current epoch
    samples_seen: int = 0
    total_steps: int = 0
    steps_per_epoch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    # The loss of this fit's first step (mean over its micro-batches, this rank's own), read once when
    # the clock starts there -- a synchronised point anyway -- so a progress display need not wait for
    # the first log. None until then.
    first_loss: float | None = None
    should_stop: bool = False  # a callback may set it to end the fit after the current step
    stop_signal: int | None = None  # the signal that stopped the fit early (preemption: StopOnSignal)


@dataclass
class FitResult:
    """What a fit did. ``extras`` holds the measured reports (``mfu``, ``nvml``, ``memory``,
    ``data_wait_s``, ``diagnosis``, and ``oom``/``batch_search`` when those features ran); ``to_json``
    merges them into the top level, as ``summary.json`` carries them."""

    device: str
    precision: str
    steps: int
    epochs: int
    final_loss: float | None
    samples_per_s: float | None
    peak_memory_bytes: int
    train_seconds: float
    val_loss: float | None = None
    accuracy: float | None = None
    skipped_steps: int = 0
    compiled: bool = False
    strategy: str = "single"
    world_size: int = 1
    batch_size: int | None = None  # per device and forward pass, as resolved (batch_size: auto)
    history: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("history")
        extras = out.pop("extras")
        return {**out, **extras}
