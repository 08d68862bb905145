"""Callbacks: hooks a trainer calls at fixed points of a fit. Override only what you need.

``trainer`` is the engine's own trainer (the torch ``Trainer``, the TensorFlow ``TfTrainer``); a callback
meant for every engine reads only ``trainer.context`` (a ``FitContext``), an engine's own callback may
read more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpulab.core.context import FitContext
    from gpulab.core.state import FitResult, FitState


class Trainer(Protocol):
    """What every engine's trainer offers its callbacks."""

    context: FitContext


class Callback:
    def on_fit_start(self, trainer: Trainer, state: FitState) -> None: ...

    def on_step_end(self, trainer: Trainer, state: FitState) -> None:
        """After every optimizer step. Keep it cheap: it runs in the hot loop."""

    def on_log(self, trainer: Trainer, state: FitState, metrics: dict[str, Any]) -> None:
        """Every ``log_every`` steps with freshly read training metrics (rank zero only)."""

    def on_validation_end(self, trainer: Trainer, state: FitState, metrics: dict[str, Any]) -> None: ...

    def on_epoch_end(self, trainer: Trainer, state: FitState) -> None: ...

    def on_fit_end(self, trainer: Trainer, state: FitState, result: FitResult) -> None: ...

    def on_exception(self, trainer: Trainer, state: FitState, error: BaseException) -> None:
        """The fit is failing with ``error`` (re-raised afterwards): release what on_fit_start took."""


class CallbackList(Callback):
    """Fans each hook out to every callback, in order."""

    def __init__(self, callbacks: list[Callback]) -> None:
        self.callbacks = list(callbacks)
        # on_step_end runs every step: call only the callbacks that override it.
        self._per_step = [cb for cb in self.callbacks if type(cb).on_step_end is not Callback.on_step_end]

    def on_fit_start(self, trainer, state):
        for cb in self.callbacks:
            cb.on_fit_start(trainer, state)

    def on_step_end(self, trainer, state):
        for cb in self._per_step:
            cb.on_step_end(trainer, state)

    def on_log(self, trainer, state, metrics):
        for cb in self.callbacks:
            cb.on_log(trainer, state, metrics)

    def on_validation_end(self, trainer, state, metrics):
        for cb in self.callbacks:
            cb.on_validation_end(trainer, state, metrics)

    def on_epoch_end(self, trainer, state):
        for cb in self.callbacks:
            cb.on_epoch_end(trainer, state)

    def on_fit_end(self, trainer, state, result):
        for cb in self.callbacks:
            cb.on_fit_end(trainer, state, result)

    def on_exception(self, trainer, state, error):
        for cb in self.callbacks:
            cb.on_exception(trainer, state, error)
