"""Metrics to TensorBoard (``tensorboard --logdir OUT/tensorboard``).

Records are handed to the event file writer in batches, at most every ``hand_over_s`` seconds (and at the
end of the fit): its writer thread then wakes once per batch rather than once per logged step, which kept
taking the GIL from the training loop (measured ~10 us per step at log_every=50 on a 250 us CPU step).
TensorBoard itself flushes events to disk only every two minutes, so the delay shows nowhere.
The writer is TensorBoard's own (what torch's SummaryWriter wraps), so no engine's framework is imported.
"""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

from gpulab.core.callbacks.base import Callback


class TensorBoardLogger(Callback):
    def __init__(self, log_dir: str | Path, hand_over_s: float = 5.0) -> None:
        self.log_dir = Path(log_dir)
        self.hand_over_s = hand_over_s
        self._writer = None
        self._pending: list[tuple[int, dict]] = []
        self._last = 0.0

    def on_fit_start(self, trainer, state):
        if "tensorflow" not in sys.modules:
            # TensorBoard's writer imports TensorFlow when it is installed (9 s measured on a busy 2-core VM,
            # gpulab[tensorflow]) only to write event files, which its stub writes alike: ask for the stub, as
            # TensorBoard's own no-TensorFlow build does. A process that already runs TensorFlow keeps it.
            sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
        # Imported late: it takes a second to load.
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._summary = Summary
        self._writer = _EventWriter(self.log_dir)
        self._last = time.monotonic()

    def _record(self, step: int, metrics: dict) -> None:
        self._pending.append((step, dict(metrics)))
        if time.monotonic() - self._last >= self.hand_over_s:
            self._hand_over()

    def _hand_over(self) -> None:
        # One event per step holding all its scalars: a third of the cost of an add_scalar per metric.
        for step, metrics in self._pending:
            values = [
                self._summary.Value(tag=key, simple_value=float(value))
                for key, value in metrics.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)
            ]
            if values:
                self._writer.add_summary(self._summary(value=values), step)
        self._pending.clear()
        self._last = time.monotonic()

    def on_log(self, trainer, state, metrics):
        self._record(state.global_step, metrics)

    def on_validation_end(self, trainer, state, metrics):
        self._record(state.global_step, metrics)

    def on_fit_end(self, trainer, state, result):
        if self._writer is not None:
            self._hand_over()
            self._writer.close()
            self._writer = None


class _EventWriter:
    """An event file as torch's SummaryWriter writes it (events.out.tfevents.*, flushed every two minutes
    and at close), through TensorBoard's writer alone."""

    def __init__(self, log_dir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self._event = Event
        self._file = EventFileWriter(str(log_dir), max_queue_size=10, flush_secs=120)

    def add_summary(self, summary, step: int) -> None:
        self._file.add_event(self._event(summary=summary, step=step, wall_time=time.time()))

    def close(self) -> None:
        self._file.close()
