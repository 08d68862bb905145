"""Metrics to TensorBoard (``tensorboard --logdir OUT/tensorboard``)."""

from __future__ import annotations

from pathlib import Path

from gpulab.train.callbacks.base import Callback


class TensorBoardLogger(Callback):
    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._writer = None

    def on_fit_start(self, trainer, state):
        from torch.utils.tensorboard import SummaryWriter  # imported late: it takes a second to load

        self._writer = SummaryWriter(str(self.log_dir))

    def _scalars(self, step: int, metrics: dict) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                self._writer.add_scalar(key, value, step)

    def on_log(self, trainer, state, metrics):
        self._scalars(state.global_step, metrics)

    def on_validation_end(self, trainer, state, metrics):
        self._scalars(state.global_step, metrics)

    def on_fit_end(self, trainer, state, result):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
