"""Metrics to TensorBoard (``tensorboard --logdir OUT/tensorboard``).

Records are handed to the event file writer in batches, at most every ``hand_over_s`` seconds (and at the
end of the fit): its writer thread then wakes once per batch rather than once per logged step, which kept
taking the GIL from the training loop (measured ~10 us per step at log_every=50 on a 250 us CPU step).
TensorBoard itself flushes events to disk only every two minutes, so the delay shows nowhere. At the end,
the fit's own figures (summary.json's samples/s, train seconds, final loss, ...) go under ``run/``.
The writer is TensorBoard's own (what torch's SummaryWriter wraps), so no engine's framework is imported.

TensorBoard's import (protobuf and its writer, about 0.3 s on the 2-core VM) runs in a thread started at
fit start, off the training's critical path: the first hand-over waits for it, so no record is lost; a
SIGTERM ends the fit through ``on_fit_end`` as before, and what a SIGKILL loses is what the writer had not
flushed yet, as before (``metrics.jsonl`` holds every logged step).

Resume: the event files already in the directory say which ``(tag, step)`` values TensorBoard holds (read in
the opening thread); the values ``metrics.jsonl`` holds up to the checkpoint and they lack are handed over
first, and the resumed run's values they hold already are not written again (``tracker_replay.py``), so
TensorBoard shows each step once after any stop, SIGKILL included.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

from gpulab.core.callbacks.hand_over import HandOverLogger
from gpulab.core.callbacks.tracker_record import run_figures
from gpulab.core.callbacks.tracker_replay import Acked, recorded


class TensorBoardLogger(HandOverLogger):
    def __init__(
        self, log_dir: str | Path, hand_over_s: float = 5.0, out_dir: str | Path | None = None
    ) -> None:
        super().__init__(hand_over_s)
        self.log_dir = Path(log_dir)
        self.out_dir = out_dir  # where metrics.jsonl is, for a resume's catching up
        self._acked = Acked()
        self._writer = None
        self._opening: threading.Thread | None = None
        self._opened: dict[str, Any] = {}

    def on_fit_start(self, trainer, state):
        if "tensorflow" not in sys.modules:
            # TensorBoard's writer imports TensorFlow when it is installed (9 s measured on a busy 2-core VM,
            # gpulab[tensorflow]) only to write event files, which its stub writes alike: ask for the stub, as
            # TensorBoard's own no-TensorFlow build does. A process that already runs TensorFlow keeps it.
            sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
        resumed = trainer.context.resumed_from is not None
        self._opening = threading.Thread(
            target=self._open, args=(resumed,), name="gpulab-tensorboard-open", daemon=True
        )
        self._opening.start()
        self._last = time.monotonic()
        if resumed:  # filtered against what the event files hold at the first hand-over
            self._pending.extend(recorded(self.out_dir, state.global_step))

    def _open(self, resumed: bool) -> None:
        """TensorBoard's import and the event file, in the opening thread; an error is kept for the fit."""
        try:
            from tensorboard.compat.proto.summary_pb2 import Summary

            held = held_events(self.log_dir) if resumed else set()
            self._opened = {"summary": Summary, "writer": _EventWriter(self.log_dir), "held": held}
        except BaseException as exc:  # raised in the training thread at the first hand-over
            self._opened = {"error": exc}

    def _ready(self) -> bool:
        """Wait for the opening thread (once); False when the fit never started."""
        if self._opening is not None:
            self._opening.join()
            self._opening = None
            if "error" in self._opened:
                raise self._opened["error"]
            self._summary, self._writer = self._opened["summary"], self._opened["writer"]
            self._acked = Acked(self._opened["held"])
        return self._writer is not None

    def _record(self, step: int, metrics: dict) -> None:
        self._pending.append((step, dict(metrics)))  # filtered at the hand-over: the held events are read
        self._due()  # by then

    def _hand_over(self) -> None:
        if self._ready():
            super()._hand_over()

    def _write(self, pending: list[tuple[int, dict]]) -> None:
        # One event per step holding all its scalars: a third of the cost of an add_scalar per metric.
        for step, metrics in pending:
            numbers = {
                k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            values = [
                self._summary.Value(tag=key, simple_value=float(value))
                for key, value in self._acked.missing(step, numbers).items()
            ]
            if values:
                self._writer.add_summary(self._summary(value=values), step)

    def on_fit_end(self, trainer, state, result):
        if self._ready():
            self._pending.append((state.global_step, run_figures(result)))  # gpulab's figures, under run/
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


def held_events(log_dir: Path) -> set[tuple[str, int]]:
    """The ``(tag, step)`` scalars the event files under ``log_dir`` hold (a record cut short is skipped)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    held: set[tuple[str, int]] = set()
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            held.update((value.tag, event.step) for value in event.summary.value)
    return held
