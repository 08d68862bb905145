"""When and how the Trainer saves and resumes: what a checkpoint holds, when it is written, exact resume.

Storage (atomic write, manifest, safe formats) lives in the engine-neutral ``gpulab.checkpoint``
package; this file decides *what* to save so that a resumed run continues at the exact next batch with
the same shuffle order and random stream, and refuses to resume (``checkpoint.refuse``) when a setting
that changes the run's trajectory differs.

With several ranks, the strategy's ``checkpoint_layout`` picks the writer (a registry, no strategy
names here): ``full`` -- the model is the same on every rank, so rank 0 writes it while the others wait
for it on the store and never write (``run_on_rank_zero``: if rank 0 fails, every rank raises);
``sharded`` -- every rank writes its shard through ``torch.distributed.checkpoint``
(``engines/torch/state/sharded.py``).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import gpulab
from gpulab.checkpoint.io import step_dir_name, step_of
from gpulab.checkpoint.locate import choose_resume, locate_for_resume
from gpulab.checkpoint.refuse import TRAJECTORY_SETTINGS as SHARED_TRAJECTORY
from gpulab.checkpoint.refuse import refuse_if_changed
from gpulab.checkpoint.save import mark_best
from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.state.api import (
    LoadedCheckpoint,
    apply_model_state,
    read_verified_checkpoint,
    restore_rng,
    save_checkpoint,
)
from gpulab.engines.torch.state.rng import capture_rng, validate_rng
from gpulab.errors import CheckpointError, GpulabWarning
from gpulab.redaction import redacted

# The torch Trainer, not imported even for its type: it imports this module (tests/test_layers.py).
Trainer = Any

# The trajectory settings every engine has, and the split of a batch into micro-batches (torch's alone).
TRAJECTORY_SETTINGS = (*SHARED_TRAJECTORY, "micro_batch")


class Checkpointer:
    def __init__(self, root: str | Path, keep_last: int | None, keep_best: str | None):
        self.root = Path(root)
        self.keep_last = keep_last
        self.keep_best = tuple(keep_best.split(":")) if keep_best else None
        self.last_saved_step: int | None = None

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
                "total_steps": state.total_steps,  # the length the LR schedule was planned for
            },
            "train_loss": trainer.train_loss_state(),
            "micro_batch": trainer.micro_batch_state(),
            "data": trainer.train_source.state_dict(),
            **_rng_payload(trainer),
            "config": redacted(trainer.settings.model_dump()),  # no credential from a URI
            "trajectory": trainer.trajectory,
            "resolved": {"precision": trainer.runtime.precision.name},
            "environment": {
                "gpulab": gpulab.__version__,
                "torch": str(torch.__version__),
                "device": str(trainer.runtime.device),
                "intra_op_threads": torch.get_num_threads(),
            },
        }
        # Validation runs after the save: its figures here would be an earlier step's (keep_best learns
        # this step's through record_validation).
        metrics = {
            k: v for k, v in state.metrics.items() if isinstance(v, (int, float)) and not k.startswith("val_")
        }
        meta = {"epoch": state.epoch, "metrics": metrics, **_settings_record(trainer)}
        layout = _LAYOUTS[trainer.runtime.strategy.checkpoint_layout]
        path = layout.save(self, trainer, payload, meta)
        self.last_saved_step = state.global_step
        return path or self.root

    def record_validation(self, step: int, metrics: dict[str, float]) -> None:
        """After the validation that follows checkpoint ``step``: mark it best when it is (``keep_best``)."""
        if self.keep_best is not None and self.keep_best[0] in metrics:
            mark_best(self.root, step_dir_name(step), *self.keep_best, metrics[self.keep_best[0]])

    def choose(self, which: str, rank_zero: bool = True) -> str | None:
        """What ``which`` resumes from, or None for a fresh start (``checkpoint.locate.choose_resume``)."""
        return choose_resume(self.root, which, rank_zero)

    def locate(self, which: str, trainer: Trainer) -> Path:
        """``latest`` under this run's root, or a checkpoint directory (or root) given by path: verified by
        the ranks together, refused ones named and kept aside (``checkpoint.locate``)."""
        return locate_for_resume(self.root, which, trainer.runtime, trainer.extras)

    def resume(self, trainer: Trainer, which: str, force: bool) -> Path:
        """Load everything, verify, and only then apply: a failure leaves the trainer untouched."""
        ckpt = read_verified_checkpoint(self.locate(which, trainer))  # verified by every rank together
        st = ckpt.state
        progress = st.get("progress") if isinstance(st.get("progress"), dict) else {}
        named, recorded = step_of(ckpt.path), progress.get("global_step")
        if named is not None and recorded != named:  # meta.json agreed with the name (verified): state.pt not
            raise CheckpointError(
                f"{ckpt.path / 'state.pt'}: records step {recorded!r:.40}, but the directory is step {named}"
            )
        missing = [k for k in ("optimizer", "progress", "data", "rng", "config") if k not in st]
        if missing:
            raise CheckpointError(
                f"{ckpt.path}: state.pt lacks {', '.join(missing)}; it was not written by a Trainer"
            )
        if not force:
            _refuse_if_changed(ckpt.path, st, trainer)
        if trainer.runtime.is_rank_zero:
            _warn_if_arithmetic_differs(st.get("environment"), trainer.runtime.device)
        rng = _own_rng(st, trainer)
        validate_rng(rng, cuda_devices=_own_cuda(trainer))  # before anything is applied
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
        metrics = ckpt.meta.get("metrics")  # the figures last read, as the saved run knew them
        if isinstance(metrics, dict):
            trainer.state.metrics.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        trainer.load_train_loss_state(st.get("train_loss"))
        trainer.load_micro_batch_state(st.get("micro_batch"))
        trainer.runtime.global_step = trainer.state.global_step
        # Last: nothing after it may draw random numbers before training resumes. Each rank takes its own.
        restore_rng(rng, cuda_devices=_own_cuda(trainer))
        self.last_saved_step = trainer.state.global_step
        return ckpt.path


def _settings_record(trainer: Trainer) -> dict[str, Any]:
    """The run's settings in meta.json (as the TensorFlow engine's), so a resume can take the ones the
    user does not repeat (``core/recorded.py``) without unpickling state.pt; a trajectory JSON cannot
    hold (a library caller's own objects) stays in state.pt only."""
    record: dict[str, Any] = {"config": redacted(trainer.settings.model_dump(mode="json"))}
    try:
        json.dumps(trainer.trajectory)
    except (TypeError, ValueError):
        return record
    return {**record, "trajectory": trainer.trajectory}


@contextlib.contextmanager
def training_rng_untouched(trainer: Trainer) -> Iterator[None]:
    """Every generator this rank draws from (Python, NumPy, torch CPU, its CUDA device) as it was before:
    what runs inside (validation) leaves the training's random streams alone."""
    saved = capture_rng(cuda_devices=_own_cuda(trainer))
    try:
        yield
    finally:
        restore_rng(saved, cuda_devices=_own_cuda(trainer))


def _own_rng(st: dict[str, Any], trainer: Trainer) -> Any:
    """This rank's saved generators (``rng``, rank 0's, when the world size changed or for an older
    checkpoint)."""
    per_rank, rt = st.get("rng_per_rank"), trainer.runtime
    return per_rank[rt.rank] if isinstance(per_rank, list) and len(per_rank) == rt.world_size else st["rng"]


def _own_cuda(trainer: Trainer) -> list[int]:
    """The CUDA device this rank computes on (its RNG is the only one it draws from), or none."""
    return trainer.runtime.accelerator.rng_devices()


def _rng_payload(trainer: Trainer) -> dict[str, Any]:
    """``rng``: this rank's generators (rank 0's is what a full checkpoint keeps there, as before);
    ``rng_per_rank``: every rank's, gathered (a collective), so each rank resumes its own stream --
    ranks draw different numbers (dropout on different data, rank-dependent sampling)."""
    mine = capture_rng(cuda_devices=_own_cuda(trainer))
    return {"rng": mine, "rng_per_rank": trainer.runtime.strategy.all_gather_object(mine)}


def pretrained_files(module: torch.nn.Module) -> dict[str, bytes]:
    """What ``from_pretrained`` needs beside ``model.safetensors``: a Hugging Face model's ``config.json``
    (its ``config`` has ``to_json_string``), naming the model's class as ``save_pretrained`` does; nothing
    for any other model. Duck-typed, so transformers is never imported here."""
    config = getattr(module, "config", None)
    if not callable(getattr(config, "to_json_string", None)):
        return {}
    fields = json.loads(config.to_json_string())
    fields.setdefault("architectures", [type(module).__name__])  # what AutoModel*.from_pretrained reads
    return {"config.json": (json.dumps(fields, indent=2, sort_keys=True) + "\n").encode()}


class _FullLayout:
    """The whole model (identical on every rank) in safetensors; rank 0 writes, the others wait."""

    @staticmethod
    def save(
        ckpt: Checkpointer, trainer: Trainer, payload: dict[str, Any], meta: dict[str, Any]
    ) -> Path | None:
        strategy = trainer.runtime.strategy
        payload = {**payload, "optimizer": strategy.optimizer_state_dict(trainer.model, trainer.optimizer)}
        model_state = strategy.model_state_dict(trainer.model)
        extra_files = pretrained_files(strategy.unwrap(trainer.model))  # a Hugging Face config.json
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
                extra_files=extra_files,
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
        from gpulab.engines.torch.state.sharded import save_sharded_checkpoint

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
        from gpulab.engines.torch.state.sharded import load_sharded_checkpoint

        load_sharded_checkpoint(ckpt.path, trainer.model, trainer.optimizer, trainer.runtime.strategy)


_LAYOUTS = {"full": _FullLayout, "sharded": _ShardedLayout}


def _warn_if_arithmetic_differs(saved: Any, device: torch.device) -> None:
    """One line where the resumed run computes on other hardware than the checkpoint's: the same
    trajectory, but its numbers differ from the uninterrupted run's by rounding."""
    if not isinstance(saved, dict):  # a checkpoint from before the environment was kept
        return
    then = str(saved.get("device", ""))
    if then and torch.device(then).type != device.type:
        warnings.warn(
            f"resuming on {device} a run checkpointed on {then}: the kernels differ, so the numbers differ "
            f"from the uninterrupted run by rounding; resume on {torch.device(then).type} for a "
            "bit-identical run",
            GpulabWarning,
            stacklevel=3,
        )
        return
    threads, now = saved.get("intra_op_threads"), torch.get_num_threads()
    if accelerator(device).is_host and isinstance(threads, int) and threads != now:
        warnings.warn(
            f"resuming with {now} intra-op threads a run checkpointed with {threads}: CPU reductions split "
            "differently, so the numbers differ from the uninterrupted run by rounding; run with "
            f"OMP_NUM_THREADS={threads} (or torch.set_num_threads({threads})) for a bit-identical resume",
            GpulabWarning,
            stacklevel=3,
        )


def _refuse_if_changed(path: Path, st: dict[str, Any], trainer: Trainer) -> None:
    refuse_if_changed(
        path, st, trainer.settings.model_dump(),
        precision=trainer.runtime.precision.name, trajectory=trainer.trajectory,
        has_schedule=trainer.scheduler is not None, total_steps=trainer.state.total_steps,
        world_size=trainer.runtime.world_size, compared=TRAJECTORY_SETTINGS,
    )  # fmt: skip
