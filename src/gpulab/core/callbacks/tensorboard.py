"""Metrics to TensorBoard (``tensorboard --logdir OUT/tensorboard``).

Records are written to the event file in batches, at most every ``hand_over_s`` seconds (and at the end of
the fit), and flushed with each batch, so TensorBoard shows a run's progress within ``hand_over_s``. At the
end, the fit's own figures (summary.json's samples/s, train seconds, final loss, ...) go under ``run/``.
The file is written by ``tfevents.py`` (the same bytes as TensorBoard's writer, without importing
TensorBoard: its import was 0.1 s of CPU on every run), so no engine's framework is imported either.
What a SIGKILL loses is the batch not handed over yet (``metrics.jsonl`` holds every logged step).

Resume: the event files already in the directory say which ``(tag, step)`` values TensorBoard holds (read
by TensorBoard's own loader, in a thread started at fit start: its import takes 0.3 s; the first hand-over
waits for it); the values ``metrics.jsonl`` holds up to the checkpoint and they lack are handed over first,
and the resumed run's values they hold already are not written again (``tracker_replay.py``), so
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
from gpulab.core.callbacks.tfevents import EventFile
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
        self._writer: EventFile | None = None
        self._reading: threading.Thread | None = None
        self._read: dict[str, Any] = {}

    def on_fit_start(self, trainer, state):
        earlier = sorted(self.log_dir.glob("events.out.tfevents.*"))
        if trainer.context.resumed_from is not None and earlier:
            self._reading = threading.Thread(
                target=self._read_held, args=(earlier,), name="gpulab-tensorboard-read", daemon=True
            )
            self._reading.start()
        if trainer.context.resumed_from is not None:  # filtered against the held events at the first
            self._pending.extend(recorded(self.out_dir, state.global_step))  # hand-over
        self._writer = EventFile(self.log_dir)
        self._last = time.monotonic()

    def _read_held(self, paths: list[Path]) -> None:
        """The held events, in the reading thread; an error is kept for the fit."""
        try:
            self._read = {"held": held_events(paths)}
        except BaseException as exc:  # raised in the training thread at the first hand-over
            self._read = {"error": exc}

    def _ready(self) -> bool:
        """Wait for the reading thread (once); False when the fit never started."""
        if self._reading is not None:
            self._reading.join()
            self._reading = None
            if "error" in self._read:
                raise self._read["error"]
            self._acked = Acked(self._read["held"])
        return self._writer is not None

    def _record(self, step: int, metrics: dict) -> None:
        self._pending.append((step, dict(metrics)))  # filtered at the hand-over: the held events are read
        self._due()  # by then

    def _hand_over(self) -> None:
        if self._ready():
            super()._hand_over()

    def _write(self, pending: list[tuple[int, dict]]) -> None:
        # One event per step holding all its scalars: a third of the cost of an event per metric.
        for step, metrics in pending:
            numbers = {
                k: float(v)
                for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            values = self._acked.missing(step, numbers)
            if values:
                self._writer.add_scalars(step, values)
        self._writer.flush()

    def on_fit_end(self, trainer, state, result):
        if self._ready():
            self._pending.append((state.global_step, run_figures(result)))  # gpulab's figures, under run/
            self._hand_over()
            self._writer.close()
            self._writer = None


def held_events(paths: list[Path]) -> set[tuple[str, int]]:
    """The ``(tag, step)`` scalars the event files at ``paths`` hold (a record cut short is skipped)."""
    if "tensorflow" not in sys.modules:
        # TensorBoard's reader imports TensorFlow when it is installed (9 s measured on a busy 2-core VM,
        # gpulab[tensorflow]) only to read event files, which its stub reads alike: ask for the stub, as
        # TensorBoard's own no-TensorFlow build does. A process that already runs TensorFlow keeps it.
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    held: set[tuple[str, int]] = set()
    for path in paths:
        for event in LegacyEventFileLoader(str(path)).Load():
            held.update((value.tag, event.step) for value in event.summary.value)
    return held
