"""What a resumed run sends a tracker before its first step: what ``metrics.jsonl`` holds, the tracker lacks.

``metrics.jsonl`` is written a line at a time, so after any stop (SIGKILL included) it holds every logged
step; a tracker holds only what it acknowledged (its batches are handed over every few seconds, TensorBoard
flushes every two minutes). On resume each tracker says which steps it holds (``Acked``); the records up to
the checkpoint's step that it lacks are sent once, and the resumed run's own records that it holds already
(logged by the stopped run after its checkpoint: the same values for an exact resume) are not sent again.
So every tracker's history equals ``metrics.jsonl``: no hole, no duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from gpulab.core.callbacks.tracker_record import numeric

METRICS_FILE = "metrics.jsonl"
_NOT_METRICS = ("step", "epoch")  # what the JSONL logger adds to each record


def recorded(out_dir: str | Path | None, through_step: int) -> Iterator[tuple[int, dict[str, float]]]:
    """The records of ``OUT/metrics.jsonl`` up to ``through_step``, in order: ``(step, numeric metrics)``.
    A line cut short by a kill, or not a record, is skipped."""
    path = Path(out_dir) / METRICS_FILE if out_dir else None
    if path is None or not path.is_file():
        return
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or step > through_step:
            continue
        metrics = numeric({k: v for k, v in record.items() if k not in _NOT_METRICS})
        if metrics:
            yield step, metrics


class Acked:
    """What a tracker holds: ``(metric, step)`` pairs, whole steps (rows), or every step up to one;
    ``missing`` keeps only the values it lacks."""

    def __init__(
        self,
        pairs: set[tuple[str, int]] | None = None,
        steps: set[int] | None = None,
        through_step: int = -1,
    ) -> None:
        self.pairs = pairs or set()
        self.steps = steps or set()
        self.through_step = through_step

    def missing(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        if step <= self.through_step or step in self.steps:
            return {}
        return {k: v for k, v in metrics.items() if (k, step) not in self.pairs}
