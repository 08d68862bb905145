"""The Trainer's side of checkpoints: what a checkpoint holds, when it is written, and exact resume.

Storage (atomic write, manifest, safe formats) lives in ``checkpoint.py``; this file decides *what* to
save so that a resumed run continues at the exact next batch with the same shuffle order and random
stream, and refuses to resume when a setting that changes the run's trajectory differs.

With several ranks, the strategy's ``checkpoint_layout`` picks the writer (a registry, no strategy
names here): ``full`` -- the model is the same on every rank, so rank 0 writes it while the others wait
for it on the store and never write (``run_on_rank_zero``: if rank 0 fails, every rank raises);
``sharded`` -- every rank writes its shard through ``torch.distributed.checkpoint`` (``checkpoint_dcp``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import gpulab
from gpulab.errors import CheckpointError
from gpulab.train.checkpoint import (
    LoadedCheckpoint,
    apply_model_state,
    load_checkpoint,
    resolve_checkpoint,
    restore_rng,
    save_checkpoint,
)
from gpulab.train.rng_state import capture_rng

if TYPE_CHECKING:
    from gpulab.train.trainer import Trainer

# Settings that change which samples meet which weights: a resume with any of them changed is not the
# same run, so it is refused unless forced.
TRAJECTORY_SETTINGS = ("batch_size", "accumulate", "micro_batch", "seed", "precision", "clip_grad_norm")


class Checkpointer:
    def __init__(self, root: str | Path, every: int | None, keep_last: int | None, keep_best: str | None):
        self.root = Path(root)
        self.every = every
        self.keep_last = keep_last
        self.keep_best = tuple(keep_best.split(":")) if keep_best else None
        self.last_saved_step: int | None = None

    def due(self, step: int) -> bool:
        return self.every is not None and step % self.every == 0

    def save(self, trainer: Trainer) -> Path:
        """Everything needed to continue ``trainer`` exactly; called on every rank (it is collective)."""
        state = trainer.state
        payload = {
            "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
            "precision": trainer.runtime.precision.state_dict(),
            "progress": {
                "epoch": state.epoch,
                "global_step": state.global_step,
                "batch_in_epoch": state.batch_in_epoch,
                "samples_seen": state.samples_seen,
                "world_size": trainer.runtime.world_size,
            },
            "train_loss": trainer.train_loss_state(),
            "micro_batch": trainer.micro_batch_state(),
            "data": trainer.train_source.state_dict(),
            "rng": capture_rng(),
            "config": trainer.settings.model_dump(),
            "environment": {
                "gpulab": gpulab.__version__,
                "torch": str(torch.__version__),
                "device": str(trainer.runtime.device),
            },
        }
        metrics = {k: v for k, v in state.metrics.items() if isinstance(v, (int, float))}
        meta = {"epoch": state.epoch, "metrics": metrics}
        layout = _LAYOUTS[trainer.runtime.strategy.checkpoint_layout]
        path = layout.save(self, trainer, payload, meta)
        self.last_saved_step = state.global_step
        return path or self.root

    def locate(self, which: str) -> Path:
        """``latest`` under this run's checkpoint root, or a checkpoint directory given by path."""
        return resolve_checkpoint(self.root if which == "latest" else which)

    def resume(self, trainer: Trainer, which: str, force: bool) -> Path:
        """Load everything, verify, and only then apply: a failure leaves the trainer untouched."""
        ckpt = load_checkpoint(self.locate(which))
        st = ckpt.state
        missing = [k for k in ("optimizer", "progress", "data", "rng", "config") if k not in st]
        if missing:
            raise CheckpointError(
                f"{ckpt.path}: state.pt lacks {', '.join(missing)}; it was not written by a Trainer"
            )
        if not force:
            _refuse_if_changed(ckpt.path, st["config"], st["progress"], trainer)
        strategy = trainer.runtime.strategy
        if ckpt.layout != strategy.checkpoint_layout:
            raise CheckpointError(
                f"{ckpt.path} holds a {ckpt.layout} model but strategy {strategy.name!r} keeps a "
                f"{strategy.checkpoint_layout} one; resume with the strategy that wrote it"
            )
        _LAYOUTS[ckpt.layout].load(ckpt, trainer)
        if trainer.scheduler is not None and st.get("scheduler") is not None:
            trainer.scheduler.load_state_dict(st["scheduler"])
        trainer.runtime.precision.load_state_dict(st.get("precision") or {})
        trainer.train_source.load_state_dict(st["data"])
        p = st["progress"]
        trainer.state.epoch, trainer.state.global_step = int(p["epoch"]), int(p["global_step"])
        trainer.state.batch_in_epoch, trainer.state.samples_seen = (
            int(p["batch_in_epoch"]),
            int(p["samples_seen"]),
        )
        trainer.load_train_loss_state(st.get("train_loss"))
        trainer.load_micro_batch_state(st.get("micro_batch"))
        trainer.runtime.global_step = trainer.state.global_step
        restore_rng(st["rng"])  # last: nothing after it may draw random numbers before training resumes
        self.last_saved_step = trainer.state.global_step
        return ckpt.path


class _FullLayout:
    """The whole model (identical on every rank) in safetensors; rank 0 writes, the others wait."""

    @staticmethod
    def save(
        ckpt: Checkpointer, trainer: Trainer, payload: dict[str, Any], meta: dict[str, Any]
    ) -> Path | None:
        strategy = trainer.runtime.strategy
        payload = {**payload, "optimizer": strategy.optimizer_state_dict(trainer.model, trainer.optimizer)}
        model_state = strategy.model_state_dict(trainer.model)
        step = trainer.state.global_step
        return strategy.run_on_rank_zero(
            lambda: save_checkpoint(
                ckpt.root,
                step=step,
                model_state=model_state,
                state=payload,
                meta=meta,
                keep_last=ckpt.keep_last,
                keep_best=ckpt.keep_best,
            ),
            name=f"checkpoint step {step}: rank 0 writes",
        )

    @staticmethod
    def load(ckpt: LoadedCheckpoint, trainer: Trainer) -> None:
        strategy = trainer.runtime.strategy
        apply_model_state(strategy.unwrap(trainer.model), ckpt.model_state)
        strategy.load_optimizer_state_dict(trainer.model, trainer.optimizer, ckpt.state["optimizer"])


class _ShardedLayout:
    """Model and optimizer sharded over the ranks (FSDP2), through torch.distributed.checkpoint."""

    @staticmethod
    def save(ckpt: Checkpointer, trainer: Trainer, payload: dict[str, Any], meta: dict[str, Any]) -> Path:
        # Imported here: torch.distributed.checkpoint costs ~1 s to import, and only FSDP2 runs use it.
        from gpulab.train.checkpoint_dcp import save_sharded_checkpoint

        strategy = trainer.runtime.strategy
        return save_sharded_checkpoint(
            ckpt.root,
            step=trainer.state.global_step,
            shards=strategy.sharded_state(trainer.model, trainer.optimizer),
            state={**payload, "optimizer": "sharded"},  # the optimizer state is in the shards
            meta=meta,
            strategy=strategy,
            keep_last=ckpt.keep_last,
            keep_best=ckpt.keep_best,
        )

    @staticmethod
    def load(ckpt: LoadedCheckpoint, trainer: Trainer) -> None:
        from gpulab.train.checkpoint_dcp import load_sharded_checkpoint

        load_sharded_checkpoint(ckpt.path, trainer.model, trainer.optimizer, trainer.runtime.strategy)


_LAYOUTS = {"full": _FullLayout, "sharded": _ShardedLayout}


def _refuse_if_changed(path: Path, saved: dict[str, Any], progress: dict[str, Any], trainer: Trainer) -> None:
    now = trainer.settings.model_dump()
    diffs = [
        f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in TRAJECTORY_SETTINGS if saved.get(k) != now.get(k)
    ]
    world = int(progress.get("world_size", 1))
    if world != trainer.runtime.world_size:
        diffs.append(f"world_size {world} -> {trainer.runtime.world_size}")
    if diffs:
        raise CheckpointError(
            f"resume from {path} refused, the run would differ: {'; '.join(diffs)} "
            "(set force_resume=True / --set force_resume=true to resume anyway)"
        )
