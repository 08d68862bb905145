"""The Trainer's step with ``micro_batch: auto``: out-of-memory recovery by ``runtime.oom.OomGuard``.

The loader then gives whole optimizer steps (``batch_size x accumulate`` samples per rank); the guard
splits each into micro-batches -- ``batch_size`` samples at first -- and, when any rank runs out of
memory, every rank halves the micro-batch, doubles the accumulation and redoes the step on the same
data. The effective batch never changes, so neither does the trajectory (up to summation order).

What differs from the plain step, and why (see ``runtime/oom.py``): every micro-batch runs under
``no_sync`` and the gradients are all-reduced once the ranks agreed (``sync_gradients``), so a rank
that ran out never leaves the others waiting inside DDP's all-reduce; the loss and samples are counted,
and the optimizer steps, only after the guard returned, because the guarded part may run twice.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from gpulab.engines.torch.runtime.oom import OomEvent, OomGuard, split_batch, sync_gradients
from gpulab.errors import ConfigError

# The torch Trainer, not imported even for its type: it imports this module (tests/test_layers.py).
Trainer = Any


class GuardedStep:
    """``step(batch, batches_in_epoch) -> (mean loss, True)``: forward and backward of one whole
    optimizer step, under the guard. The same signature as the Trainer's plain micro-batch step."""

    def __init__(self, trainer: Trainer) -> None:
        rt, s = trainer.runtime, trainer.settings
        if rt.strategy.checkpoint_layout == "sharded":
            # FSDP2 reduce-scatters inside backward: micro-batches cannot defer it to one all-reduce.
            raise ConfigError(
                f"micro_batch: auto does not work with strategy {rt.strategy.name!r} (sharded "
                "parameters); use ddp or single, or unset micro_batch"
            )
        self.trainer = trainer
        # One process: no agreement to reach, so no host sync per step.
        self.all_reduce = rt.all_reduce if rt.world_size > 1 else None
        self.guard = OomGuard(
            s.batch_size * s.accumulate,
            s.accumulate,
            device=rt.device,
            all_reduce=self.all_reduce,
            rank=rt.rank,
        )

    def __call__(self, batch: Any, batches_in_epoch: int) -> tuple[torch.Tensor, bool]:
        t = self.trainer
        loss = self.guard.run(
            lambda _micro_batch, parts: self._forward_backward(batch, parts),
            clear_grads=lambda: t.optimizer.zero_grad(set_to_none=True),
        )
        sync_gradients(t.model.parameters(), self.all_reduce)
        return loss, True

    def _forward_backward(self, batch: Any, parts: int) -> torch.Tensor:
        """Gradients of the batch's mean loss, accumulated over ``parts`` micro-batches; the mean loss."""
        t, rt = self.trainer, self.trainer.runtime
        total = None
        for micro, weight in split_batch(batch, parts):
            with rt.no_sync(t.model):
                with rt.autocast():
                    loss = t.torch_step.loss_of(micro)
                rt.backward(loss * weight)
            part = loss.detach().float() * weight
            total = part if total is None else total + part
        return total

    # -- checkpoints: a resumed run keeps the micro-batch it had shrunk to -----------------------------
    def state_dict(self) -> dict[str, Any]:
        g = self.guard
        return {"accumulate": g.accumulate, "attempts": g.attempts, "events": [asdict(e) for e in g.events]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        g = self.guard
        g.accumulate = int(state["accumulate"])
        g.attempts = int(state["attempts"])
        g.events = [OomEvent(**e) for e in state["events"]]

    def summary(self) -> dict[str, Any]:
        return self.guard.summary()
