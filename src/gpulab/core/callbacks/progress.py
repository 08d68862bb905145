"""A rich progress bar with loss, samples/s and MFU (when ``MfuCallback`` runs before it); shown only
where a person is watching a terminal."""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gpulab.core.callbacks.base import Callback


class ProgressBar(Callback):
    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task = None
        self._last = 0.0
        self._loss_shown = False

    def on_fit_start(self, trainer, state):
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[speed]}"),
            TimeRemainingColumn(),
            transient=False,
            # No refresh thread: it would take the GIL from the training loop ten times a second.
            # The bar is redrawn from on_step_end instead, at most ten times a second.
            auto_refresh=False,
        )
        self._task = self._progress.add_task(
            "fit", total=state.total_steps, completed=state.global_step, epoch=state.epoch, loss="-", speed=""
        )
        self._progress.start()

    graph_safe = True  # on_step_end reads the clock and the first loss the Trainer already read: no tensor

    def on_step_end(self, trainer, state):
        if not self._loss_shown and state.first_loss is not None:
            # The first step's loss, read once when the fit's clock started: no "loss -" until the first log.
            self._loss_shown = True
            self._progress.update(self._task, loss=f"{state.first_loss:.4f}")
        # Redraw at most 10 times a second: a rich update per step would cost more than a small step.
        now = time.monotonic()
        if now - self._last >= 0.1:
            self._last = now
            self._progress.update(self._task, completed=state.global_step, epoch=state.epoch, refresh=True)

    def on_log(self, trainer, state, metrics):
        # No redraw here (one costs ~0.3 ms): the next throttled on_step_end shows the new figures.
        self._loss_shown = True
        self._progress.update(self._task, loss=f"{metrics['loss']:.4f}", speed=speed_text(metrics))

    def on_fit_end(self, trainer, state, result):
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step, refresh=True)
            self._progress.stop()


def speed_text(metrics: dict) -> str:
    """``1,234 samples/s, MFU 41%``: MFU against the datasheet peak, else against the measured one."""
    speed = metrics.get("samples_per_s")
    if not speed:
        return ""
    text = f"{speed:,.0f} samples/s"
    if metrics.get("mfu") is not None:
        return f"{text}, MFU {metrics['mfu']:.1%}"
    if metrics.get("mfu_measured") is not None:
        return f"{text}, MFU {metrics['mfu_measured']:.1%} of measured peak"
    return text
