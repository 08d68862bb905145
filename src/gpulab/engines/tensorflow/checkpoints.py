"""Checkpoints and exact resume on the TensorFlow engine, on the engine-neutral ``gpulab.checkpoint``.

The same run-directory layout (``ROOT/step-NNNNNNNN/``, ``ROOT/latest``), the same atomic commit (a
``.tmp-`` directory, fsync'd, MANIFEST last, renamed, then ``latest``, then ``keep_last`` pruning:
``checkpoint.save.commit_checkpoint``) and the same verified resume (``checkpoint.locate``: a tampered file
is refused in one line, ``latest`` falls back past a damaged checkpoint naming it). What differs is what is
inside: a ``tf.train.Checkpoint`` (``ckpt.index``/``ckpt.data-*``: the model's variables, the optimizer's
slots, iterations and loss scale, and the step) instead of safetensors + state.pt, and the host-side
progress (epoch, batch in epoch, samples) in meta.json. The data order continues at the next batch because
each epoch's order is a function of (seed, epoch) (``data.epoch_dataset``) and the resumed epoch skips the
batches already taken.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.checkpoint.io import (
    META,
    TMP_PREFIX,
    fsync_file,
    manifest_layout,
    one_line,
    remove_path,
    remove_stale_tmp,
    step_dir_name,
)
from gpulab.checkpoint.locate import choose_resume, locate_for_resume
from gpulab.checkpoint.read import load_meta
from gpulab.checkpoint.refuse import TRAJECTORY_SETTINGS, refuse_if_changed
from gpulab.checkpoint.save import commit_checkpoint, disk_full_as_error, meta_bytes
from gpulab.engines.tensorflow.checkpoint_files import unreadable
from gpulab.engines.tensorflow.checkpoint_layout import TF_LAYOUT, TF_PREFIX
from gpulab.errors import CheckpointError
from gpulab.redaction import redacted

LAYOUT = TF_LAYOUT


class TfCheckpointer:
    def __init__(self, root: str | Path, keep_last: int | None) -> None:
        self.root = Path(root)
        self.keep_last = keep_last
        self.last_saved_step: int | None = None

    def save(self, trainer: Any, tf_checkpoint: Any) -> Path:
        """Every worker writes (a MultiWorkerMirroredStrategy variable may need them all); the chief's copy
        is committed, the others' go to a temporary directory that is removed (TensorFlow's own pattern)."""
        state, chief = trainer.state, trainer.is_rank_zero
        name = step_dir_name(state.global_step)
        self.root.mkdir(parents=True, exist_ok=True)
        if chief:
            remove_stale_tmp(self.root)
        tmp = self.root / f"{TMP_PREFIX}{name}-{os.getpid()}"
        # TensorFlow's SaveV2 names a full disk in a ResourceExhaustedError: one line, as torch's saves.
        with disk_full_as_error(self.root, name, _variable_bytes(tf_checkpoint)):
            try:
                tmp.mkdir()
                tf_checkpoint.write(str(tmp / TF_PREFIX))
                for path in tmp.iterdir():
                    fsync_file(path)
            except BaseException:
                remove_path(tmp)
                raise
        if not chief:
            remove_path(tmp)
            self.last_saved_step = state.global_step
            return self.root / name
        progress = {
            "epoch": state.epoch,
            "global_step": state.global_step,
            "batch_in_epoch": state.batch_in_epoch,
            "samples_seen": state.samples_seen,
            "world_size": trainer.dist.num_workers,
            "total_steps": state.total_steps,
        }
        # Validation runs after the save: its figures would be an earlier step's.
        metrics = {
            k: v for k, v in state.metrics.items() if isinstance(v, (int, float)) and not k.startswith("val_")
        }
        meta = {
            "engine": "tensorflow",
            "epoch": state.epoch,
            "metrics": metrics,
            "progress": progress,
            "config": redacted(trainer.settings.model_dump(mode="json")),  # no credential from a URI
            "trajectory": trainer.trajectory,
            "resolved": {"precision": trainer.precision.name},
            "train_loss": trainer.loss_window,
        }
        needed = sum(p.stat().st_size for p in tmp.iterdir())
        path = commit_checkpoint(
            tmp, self.root, name, None, meta_bytes(state.global_step, {}, meta, _versions()), layout=LAYOUT,
            keep_last=self.keep_last, needed=needed,
        )  # fmt: skip
        self.last_saved_step = state.global_step
        return path

    def choose(self, which: str, rank_zero: bool = True) -> str | None:
        """What ``which`` resumes from, or None for a fresh start (``checkpoint.locate.choose_resume``)."""
        return choose_resume(self.root, which, rank_zero)

    def resume(self, trainer: Any, which: str, tf_checkpoint: Any, force: bool) -> Path:
        """Verify (MANIFEST), check the settings, then restore variables and progress."""
        # TensorFlow's own files read before anything is restored: a damaged one is passed over as a
        # tampered MANIFEST is, so the previous checkpoint is used and said.
        path = locate_for_resume(self.root, which, _Workers(trainer), trainer.extras, readable=unreadable)
        if manifest_layout(path) != LAYOUT:
            raise CheckpointError(
                f"{path} was written by the torch engine; resume it with --engine torch (or start afresh)"
            )
        meta = load_meta(path / META)
        progress, saved = meta.get("progress"), meta.get("config")
        if not isinstance(progress, dict) or not isinstance(saved, dict):
            raise CheckpointError(f"{path / META}: lacks progress/config; it was not written by a TfTrainer")
        if not force:
            _refuse_if_changed(path, meta, trainer)
        # Every saved object must find its variable: a different model is an error, not a partial load.
        try:
            tf_checkpoint.read(str(path / TF_PREFIX)).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:  # another model's variables: a mistake, not damage
            raise CheckpointError(f"{path}: does not fit this model ({one_line(exc)})") from exc
        state = trainer.state
        state.epoch, state.global_step = int(progress["epoch"]), int(progress["global_step"])
        state.batch_in_epoch, state.samples_seen = (
            int(progress["batch_in_epoch"]),
            int(progress["samples_seen"]),
        )
        metrics = meta.get("metrics")
        if isinstance(metrics, dict):
            state.metrics.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        window = meta.get("train_loss")
        trainer.loss_window = window if isinstance(window, list) else []
        self.last_saved_step = state.global_step
        return path


def _variable_bytes(tf_checkpoint: Any) -> int:
    """About what a checkpoint of these variables needs on disk (for the message of a full disk)."""
    model, optimizer = tf_checkpoint.model, tf_checkpoint.optimizer
    variables = [*model.variables, *getattr(optimizer, "variables", [])]
    # Keras 3 gives a dtype as a name ("float32"), TensorFlow as a DType: NumPy reads both by name.
    return sum(math.prod(v.shape) * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize for v in variables)


def _refuse_if_changed(path: Path, meta: dict, trainer: Any) -> None:
    """As torch's: the settings that change the trajectory, the recipe, an LR schedule's planned length
    and the number of workers."""
    refuse_if_changed(
        path, meta, trainer.settings.model_dump(mode="json"),
        precision=trainer.precision.name, trajectory=trainer.trajectory,
        has_schedule=trainer.has_schedule, total_steps=trainer.state.total_steps,
        world_size=trainer.dist.num_workers, compared=TRAJECTORY_SETTINGS,
    )  # fmt: skip


class _Workers:
    """What ``locate_for_resume`` reads of a runtime. Each worker verifies the whole checkpoint itself
    (there is no object gather here); only the chief sets a refused one aside."""

    world_size = 1
    rank = 0

    def __init__(self, trainer: Any) -> None:
        self.is_rank_zero = trainer.is_rank_zero


def _versions() -> dict[str, str]:
    """meta.json's framework versions: TensorFlow's and Keras's (this engine runs no torch)."""
    from gpulab.engines.tensorflow.importing import require_tensorflow

    tf = require_tensorflow()
    return {"tensorflow": tf.__version__, "keras": tf.keras.__version__}
