"""The experiment trackers a run logs to (``trackers: [tensorboard, mlflow, wandb]``), shared by both engines.

- ``tracker_callbacks``: the callbacks the settings ask for (rank 0 only: the trainers build none on the
  other ranks). A tracker whose package is missing is one line with the pip command, before any step.
- ``tracker_record.py``: what the trackers share (the run-id file, flattened settings, the start failure).
- ``LateFiles``: files written after the fit (summary.json) go to the trackers' runs too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpulab.core.callbacks.base import Callback
from gpulab.errors import MissingPackageError


def need(module: str, tracker: str) -> Any:
    """Import a tracker's package, or say in one line that it is missing and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackageError(
            f"tracker {tracker!r} needs the Python package {module!r}, which is not installed ({exc}); "
            f"fix: pip install 'gpulab[{tracker}]', or remove {tracker} from trackers"
        ) from None


def tracker_callbacks(settings: Any) -> list[Callback]:
    """The loggers ``settings.trackers`` names (TensorBoard only with an ``out_dir``)."""
    out: list[Callback] = []
    for name in settings.trackers:
        if name == "tensorboard" and settings.out_dir and settings.tensorboard:
            from gpulab.core.callbacks.tensorboard import TensorBoardLogger

            out.append(TensorBoardLogger(f"{settings.out_dir}/tensorboard", out_dir=settings.out_dir))
        elif name == "mlflow":
            need("mlflow", "mlflow")
            from gpulab.core.callbacks.mlflow_tracker import MlflowLogger

            out.append(MlflowLogger(settings.mlflow, settings.out_dir))
        elif name == "wandb":
            need("wandb", "wandb")
            from gpulab.core.callbacks.wandb_tracker import WandbLogger

            out.append(WandbLogger(settings.wandb, settings.out_dir))
    return out


class LateFiles(Callback):
    """Files a run writes after its fit (summary.json, plots), for the trackers that keep files: which
    trackers those are it reads from the fit's callbacks (the loop's list) when the fit starts."""

    def __init__(self) -> None:
        self.keepers: list[Any] = []

    def on_fit_start(self, trainer: Any, state: Any) -> None:
        self.keepers = [cb for cb in trainer.callbacks.callbacks if getattr(cb, "attach", None) is not None]

    def send(self, paths: Iterable[Path]) -> None:
        existing = [Path(p) for p in paths if Path(p).is_file()]
        for keeper in self.keepers if existing else ():
            keeper.attach(existing)
