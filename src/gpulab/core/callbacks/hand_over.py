"""What the TensorBoard, MLflow and W&B loggers share: records kept in order and handed to the tracker's
writer in batches, at most every ``hand_over_s`` seconds (and at the end of the fit), so that its writer
(a thread, a client) wakes once per batch rather than once per logged step, off the training loop."""

from __future__ import annotations

import time
from typing import Any

from gpulab.core.callbacks.base import Callback


class HandOverLogger(Callback):
    """A logger of the steps' and validations' metrics. A subclass says what one record is
    (``_record(step, metrics)``, which adds it to ``_pending`` and calls ``_due``) and how a batch is
    written (``_write(pending)``); ``_hand_over`` writes what is pending now."""

    def __init__(self, hand_over_s: float) -> None:
        self.hand_over_s = hand_over_s
        self._pending: list[Any] = []
        self._last = 0.0  # when the last batch was handed over (the fit's start before the first)

    def _record(self, step: int, metrics: dict) -> None:
        raise NotImplementedError

    def _write(self, pending: list[Any]) -> None:
        raise NotImplementedError

    def _due(self) -> None:
        """Hand the pending records over when ``hand_over_s`` has passed since the last batch."""
        if time.monotonic() - self._last >= self.hand_over_s:
            self._hand_over()

    def _hand_over(self) -> None:
        pending, self._pending = self._pending, []
        self._write(pending)
        self._last = time.monotonic()

    def on_log(self, trainer, state, metrics):
        self._record(state.global_step, metrics)

    def on_validation_end(self, trainer, state, metrics):
        self._record(state.global_step, metrics)
