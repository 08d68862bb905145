"""Metrics to ``metrics.jsonl``: one JSON object per logged step or validation."""

from __future__ import annotations

import json
from pathlib import Path

from gpulab.train.callbacks.base import Callback


class JsonlLogger(Callback):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = None

    def on_fit_start(self, trainer, state):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A resumed run continues the file; a fresh run starts it anew.
        self._file = self.path.open("a" if trainer.resumed_from else "w", buffering=1)

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
