"""Metrics to ``metrics.jsonl``: one JSON object per logged step or validation."""

from __future__ import annotations

import json
from pathlib import Path

from gpulab.core.callbacks.base import Callback


class JsonlLogger(Callback):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = None

    def on_fit_start(self, trainer, state):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A resumed run continues the file; a fresh run starts it anew.
        if trainer.context.resumed_from:
            self._drop_after(state.global_step)
        self._file = self.path.open("a" if trainer.context.resumed_from else "w", buffering=1)

    def _drop_after(self, step: int) -> None:
        """Keep only the records up to the checkpoint's step: the resumed run logs the later ones again
        (and a line cut short by a kill is dropped). Replaced atomically: a kill here loses nothing."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return
        kept = [line for line in lines if _step_of(line) is not None and _step_of(line) <= step]
        if len(kept) == len(lines):
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")

    def on_log(self, trainer, state, metrics):
        self._write({"step": state.global_step, "epoch": state.epoch, **metrics})

    def on_validation_end(self, trainer, state, metrics):
        self._write({"step": state.global_step, "epoch": state.epoch, **metrics})

    def on_fit_end(self, trainer, state, result):
        if self._file is not None:
            self._file.close()
            self._file = None


def _step_of(line: str) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None
