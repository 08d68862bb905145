"""The fit's plan, computed once for every engine from the engine's facts and the settings: how many
micro-batches an epoch and a step hold, how many optimizer steps the fit takes, where each accumulation
window ends and which steps write a checkpoint. The loop reads it; an engine asks ``total_steps`` of it for
an LR schedule planned over the fit's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpulab.core.state import FitState
from gpulab.errors import ConfigError, DataError


@dataclass(frozen=True)
class FitPlan:
    """``batches_per_epoch``: micro-batches an epoch (None: a stream of unknown length);
    ``batches_per_step``: micro-batches an optimizer step; ``steps_per_epoch``: 0 for a stream."""

    batches_per_epoch: int | None
    batches_per_step: int
    total_steps: int
    steps_per_epoch: int
    checkpoint_every: int | None

    def window(self, batch_in_epoch: int) -> int:
        """The micro-batches of the window that batch ``batch_in_epoch`` falls in: the last window of an
        epoch may be short (a stream's length is unknown: its windows are full)."""
        n, per_step = self.batches_per_epoch, self.batches_per_step
        return per_step if n is None else min(per_step, n - (batch_in_epoch - batch_in_epoch % per_step))

    def closes(self, batch_in_epoch: int, window: int) -> bool:
        """Batch ``batch_in_epoch`` is the last of its window: the optimizer steps after it."""
        return batch_in_epoch % self.batches_per_step == window - 1

    def checkpoint_due(self, step: int) -> bool:
        """A scheduled checkpoint (``checkpoint_every``) follows optimizer step ``step``."""
        return self.checkpoint_every is not None and step % self.checkpoint_every == 0

    def fresh_state(self) -> FitState:
        """The progress of a fit not yet started (a resume then overwrites its counters)."""
        return FitState(total_steps=self.total_steps, steps_per_epoch=self.steps_per_epoch)


def plan_fit(settings: Any, batches_per_epoch: int | None, batches_per_step: int) -> FitPlan:
    """The plan of a fit whose engine loads ``batches_per_epoch`` micro-batches an epoch (None: a stream)
    and steps every ``batches_per_step``; ``settings``: its ``max_steps``, ``epochs``, ``checkpoint_every``.
    A stream needs ``max_steps``; an epoch that gives no batch is refused."""
    every = settings.checkpoint_every
    if batches_per_epoch is None:
        if not settings.max_steps:
            raise ConfigError(
                "the training data has no length (an IterableDataset): set max_steps; epochs then count its "
                "passes"
            )
        return FitPlan(None, batches_per_step, settings.max_steps, 0, every)
    if batches_per_epoch == 0:
        raise DataError(
            "training data gives no batch (empty, or fewer samples than batch_size where the last partial "
            "batch is dropped)"
        )
    steps_per_epoch = math.ceil(batches_per_epoch / batches_per_step)
    total = settings.max_steps or settings.epochs * steps_per_epoch
    return FitPlan(batches_per_epoch, batches_per_step, total, steps_per_epoch, every)
