"""Plain progress lines where no progress bar is drawn (a CI log, ``nohup``, a pipe), so a long run is
never silent for minutes: one line at the first step, then one every ``every_s`` seconds, and one at the
end; each is flushed at once (a pipe would otherwise hold it in a block buffer).

A line shows the loss last read (at a log, every ``log_every`` steps, or the first step's): it reads
nothing from the device itself, and says at which step a loss older than the line was read.
"""

from __future__ import annotations

import sys
import time

from gpulab.core.callbacks.base import Callback
from gpulab.core.callbacks.progress import speed_text


class LogLines(Callback):
    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._metrics: dict = {}
        self._read_at = 0  # the step at which the loss in _metrics was read
        self._first: tuple[float, int] | None = None  # (monotonic time, step) at the fit's first step
        self._last_line = 0.0

    def on_log(self, trainer, state, metrics):
        self._metrics, self._read_at = dict(metrics), state.global_step

    graph_safe = True  # on_step_end reads the clock and the first loss the Trainer already read: no tensor

    def on_step_end(self, trainer, state):
        now = time.monotonic()
        if self._first is None:
            self._first = (now, state.global_step)
            if not self._metrics and state.first_loss is not None:
                self._metrics, self._read_at = {"loss": state.first_loss}, state.global_step
        elif now - self._last_line < self.every_s:
            return
        self._last_line = now
        _emit(self._fields(state) + self._eta(state, now))

    def on_fit_end(self, trainer, state, result):
        if self._first is None:
            return  # no step ran (a resume at the end): nothing to report
        loss = "-" if result.final_loss is None else f"{result.final_loss:.4f}"
        speed = f"{result.samples_per_s:,.0f} samples/s" if result.samples_per_s else ""
        _emit([*self._position(state), f"loss {loss}", speed, f"done in {result.train_seconds:.1f} s"])

    def _fields(self, state) -> list[str]:
        loss = self._metrics.get("loss")
        text = "loss -" if loss is None else f"loss {loss:.4f}"
        if loss is not None and self._read_at != state.global_step:
            text += f" (read at step {self._read_at})"
        return [*self._position(state), text, speed_text(self._metrics)]

    @staticmethod
    def _position(state) -> list[str]:
        step = f"step {state.global_step}/{state.total_steps}"
        if not state.steps_per_epoch:  # a stream: no known number of epochs
            return [step, f"epoch {state.epoch + 1}"]
        epochs = -(-state.total_steps // state.steps_per_epoch)
        return [step, f"epoch {min(state.epoch + 1, epochs)}/{epochs}"]

    def _eta(self, state, now: float) -> list[str]:
        t0, step0 = self._first
        done = state.global_step - step0  # steps since the first (which pays compilation and warm-up)
        if done <= 0 or now <= t0:
            return []
        left = (state.total_steps - state.global_step) * (now - t0) / done
        return [f"ETA {_duration(left)}"]


def _emit(fields: list[str]) -> None:
    print("  ".join(f for f in fields if f), file=sys.stdout, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
