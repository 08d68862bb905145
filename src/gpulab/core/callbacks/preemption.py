"""``StopOnSignal``: ends a fit at the first step boundary after a ``SignalWatch`` recorded a signal."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from gpulab.core.callbacks.base import Callback

if TYPE_CHECKING:
    from gpulab.core.callbacks.base import Trainer
    from gpulab.core.preemption import SignalWatch
    from gpulab.core.state import FitState


class StopOnSignal(Callback):
    """Every rank must stop at the same step, or the final checkpoint (a collective) would hang: with several
    ranks the flag is all-reduced each step, read one step late so that no step waits for it
    (``Runtime.lagged_flag``; the TensorFlow engine folds it into the step's own all-reduce); a single
    process only reads it."""

    # One process reads a Python flag per step (no tensor); several ranks all-reduce it, but a whole-step
    # graph runs on one device only. Every run the CLI builds carries this callback: without the mark
    # cuda_graph could never engage (the H100 run of 2026-11-26).
    graph_safe = True

    def __init__(self, watch: SignalWatch) -> None:
        self.watch = watch

    def on_fit_start(self, trainer: Trainer, state: FitState) -> None:
        self.watch.rearm()  # the set-up may have replaced the handlers (TensorFlow's multi-worker strategy)

    def on_step_end(self, trainer: Trainer, state: FitState) -> None:
        asked = self.watch.signum is not None
        context = trainer.context
        if context.world_size > 1:
            asked = context.agree_stop(asked)
        if asked:
            state.should_stop = True
            # A rank that was not signalled itself stops for its peers' SIGTERM.
            state.stop_signal = self.watch.signum or int(signal.SIGTERM)
