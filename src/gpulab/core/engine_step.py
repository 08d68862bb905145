"""``EngineStep``: what an engine's trainer gives the shared fit loop (``core/loop.py``).

The attributes are the engine's facts and objects, which the loop reads and never writes (what the loop
keeps -- the callbacks the set-up returns, the fit's context, the last checkpoint -- is its own
``LoopState``); the methods are the engine's step, its loss, its state on disk, its validation and its
device facts. A trainer subclasses it to keep the defaults (the methods with a body).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from gpulab.checkpoint.io import one_line
from gpulab.core.clock import Clock
from gpulab.core.context import FitContext
from gpulab.core.plan import FitPlan
from gpulab.core.state import FitResult, FitState


class EngineStep(Protocol):
    """What an engine's trainer gives the loop. The loop reads the attributes and writes none of them; the
    methods with a body are defaults an engine may keep."""

    settings: Any  # TrainerSettings, as resolved for this fit
    state: FitState
    history: list[dict[str, Any]]
    extras: dict[str, Any]  # what the set-up measured or chose, carried into the result
    checkpointer: Any  # last_saved_step, record_validation(step, metrics); None: no directory
    resumed_from: Path | None
    is_rank_zero: bool
    plan: FitPlan  # the fit's length and windows, from ``core.plan.plan_fit`` over the engine's facts
    sample_scale: int  # how many ranks' samples ``state.samples_seen`` stands for (samples/s is global)
    threads_hint: str  # the busy-machine note's hint for this engine (hardware.load.load_during)
    has_validation: bool
    has_schedule: bool  # the learning rate is a schedule over the planned length (it cannot stretch)

    # -- the steps --------------------------------------------------------------------------------------
    def epoch_batches(self) -> Iterable[Any]:
        """This epoch's micro-batches from ``state.batch_in_epoch`` on (a resumed run starts mid-epoch)."""
        ...

    def micro_step(self, batch: Any, window: int, closes: bool) -> int:
        """Forward and backward of one micro-batch of a window of ``window``, and the optimizer step when it
        ``closes`` the window; keeps its loss for the next log. Returns the batch's samples."""
        ...

    def read_loss(self) -> float | None:
        """The mean training loss since the last read (one host sync; None if none), then forgotten; raises
        ``NonFiniteLossError`` on NaN/inf, on every rank together."""
        ...

    def learning_rate(self) -> float: ...

    def first_step(self) -> float | None:
        """After the fit's first optimizer step, which pays compilation: its loss, read once."""
        ...

    def save_checkpoint(self) -> Path:
        """Write a checkpoint of this step (never of NaN) and return its path."""
        ...

    def validate(self, track: Callable[[Iterable[Any]], Iterator[Any]]) -> dict[str, float]:
        """``val_loss`` (and ``val_accuracy``), over the ranks; ``track`` wraps the validation batches so a
        failure names the one it failed on. Draws nothing from the training's random streams."""
        ...

    def fit_context(self) -> FitContext: ...

    def result_facts(self) -> dict[str, Any]:
        """``device``, ``precision``, ``strategy``, ``world_size``, ``batch_size`` for the result."""
        ...

    def memory(self) -> tuple[int, dict[str, Any]]:
        """The peak bytes since ``reset_peak_memory`` and the memory report for summary.json."""
        ...

    # -- defaults ---------------------------------------------------------------------------------------
    def on_loop_start(self, clock: Clock) -> None:
        """The loop's clock, before the first step (an engine leaves its recompiles out of it)."""

    def drop_window(self) -> None:
        """A stream ended inside an accumulation window: forget its gradients."""

    def synchronize(self) -> None:
        """Wait for the device's queued work (the clock's edges only)."""

    def reset_peak_memory(self) -> None: ...

    def result_extras(self) -> dict[str, Any]:
        """The engine's own reports for the result's extras (its runtime, compilation, ...)."""
        return {}

    def skipped_steps(self) -> int:
        return 0

    def compiled(self) -> bool:
        return False

    def native_dtypes(self) -> dict[str, bool | None] | None:
        return None

    def before_fit_end(self, result: FitResult) -> None:
        """The result is built; ``on_fit_end`` comes next."""

    def describe_batch(self, batch: Any) -> str:
        return type(batch).__name__

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False

    def describe_error(self, error: BaseException) -> str:
        """One line for a user's error under ``validation failed``."""
        return f"{type(error).__name__}: {one_line(error)}"
