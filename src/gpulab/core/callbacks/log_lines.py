"""Plain progress lines where no progress bar is drawn (a CI log, ``nohup``, a pipe), so a long run is
never silent for minutes: one line at the first step, then one every ``every_s`` seconds, and one at the
end; each is flushed at once (a pipe would otherwise hold it in a block buffer).

A line shows the loss last read (at a log, every ``log_every`` steps, or the first step's): it reads
nothing from the device itself, and says at which step a loss older than the line was read.

The ETA is the steps left times the mean time a step, leaving out a one-off: a gap between two steps over
``ONE_OFF_FACTOR`` times slower a step than all the other gaps together (a graph traced again at the second
step after a resume, the first validation's compilation). Taken with them, the first line after a
TensorFlow resume said ``ETA 1:24:19`` for a run that ended 30 s later. Recurring costs stay in: a host that
waits for the device every ``log_every`` steps (steps queued asynchronously, then one long gap) is well
within the factor.
"""

from __future__ import annotations

import sys
import time
from collections import deque

from gpulab.core.callbacks.base import Callback
from gpulab.core.callbacks.progress import speed_text

ONE_OFF_FACTOR = 20.0
GAPS_KEPT = 1000  # the most recent gaps between calls (a call may end several steps) the ETA uses


class LogLines(Callback):
    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._metrics: dict = {}
        self._read_at = 0  # the step at which the loss in _metrics was read
        self._first: tuple[float, int] | None = None  # (monotonic time, step) at the fit's first step
        self._last_line = 0.0
        self._last_step = (0.0, 0)  # monotonic time and step of the previous call
        self._gaps: deque[tuple[float, int]] = deque(maxlen=GAPS_KEPT)  # (seconds, steps) between calls

    def on_log(self, trainer, state, metrics):
        self._metrics, self._read_at = dict(metrics), state.global_step

    graph_safe = True  # on_step_end reads the clock and the first loss the Trainer already read: no tensor

    def on_step_end(self, trainer, state):
        now = time.monotonic()
        if self._first is not None and state.global_step > self._last_step[1]:
            self._gaps.append((now - self._last_step[0], state.global_step - self._last_step[1]))
        self._last_step = (now, state.global_step)
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
        # A stopped fit (a signal) logs nothing at its end: its line shows the loss last read, with its step
        loss = self._loss(state) if result.final_loss is None else f"loss {result.final_loss:.4f}"
        speed = f"{result.samples_per_s:,.0f} samples/s" if result.samples_per_s else ""
        _emit([*self._position(state), loss, speed, _ending(result)])

    def _fields(self, state) -> list[str]:
        return [*self._position(state), self._loss(state), speed_text(self._metrics)]

    def _loss(self, state) -> str:
        """``loss 0.1234``, ``(read at step N)`` when older than the line; nothing before any was read."""
        loss = self._metrics.get("loss")
        if loss is None:
            return ""
        read_at = f" (read at step {self._read_at})" if self._read_at != state.global_step else ""
        return f"loss {loss:.4f}{read_at}"

    @staticmethod
    def _position(state) -> list[str]:
        step = f"step {state.global_step}/{state.total_steps}"
        if not state.steps_per_epoch:  # a stream: no known number of epochs
            return [step, f"epoch {state.epoch + 1}"]
        epochs = -(-state.total_steps // state.steps_per_epoch)
        return [step, f"epoch {min(state.epoch + 1, epochs)}/{epochs}"]

    def _eta(self, state, now: float) -> list[str]:
        """From the steps after the first (which pays compilation and warm-up), one-offs left out."""
        if not self._gaps:
            return []
        seconds = sum(t for t, _ in self._gaps)
        steps = sum(n for _, n in self._gaps)
        kept = [(t, n) for t, n in self._gaps if not _one_off(t, n, seconds - t, steps - n)]
        per_step = sum(t for t, _ in kept) / sum(n for _, n in kept)
        return [f"ETA {_duration((state.total_steps - state.global_step) * per_step)}"]


def _ending(result) -> str:
    """``done in 17.1 s``; a fit stopped by a signal says so (it was "done in" too), and how it goes on."""
    stopped = result.extras.get("preempted")
    if not stopped:
        return f"done in {result.train_seconds:.1f} s"
    how = (
        "resume it with --resume latest"
        if stopped.get("checkpoint")
        else "no checkpoint saved (checkpoints are off)"
    )
    seconds = f"{result.train_seconds:.1f} s"
    return f"stopped by {stopped['signal']} at step {stopped['step']} after {seconds}: {how}"


def _one_off(seconds: float, steps: int, other_seconds: float, other_steps: int) -> bool:
    """A gap far slower a step than all the others together."""
    return other_steps > 0 and seconds / steps > ONE_OFF_FACTOR * other_seconds / other_steps


def _emit(fields: list[str]) -> None:
    print("  ".join(f for f in fields if f), file=sys.stdout, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
