"""Stopping on a NaN/inf loss: on every rank together, naming the step, without a sync per step.

The detection piggybacks on the metrics read the loop does anyway (every ``log_every`` steps and at
the end): the logged loss is the all-reduced mean of every rank's losses over the window, so it is NaN/inf
exactly when some rank had a non-finite loss in it -- and every rank reads the same value, so every rank
decides the same way, with no extra host sync or collective while training is healthy. To *name* the
step, the Trainer keeps each micro-batch's loss on the device anyway (``metrics.LossWindow``, for the
logged mean); only when the logged loss is not finite is that window searched, and the ranks agree on the
first bad step with a ``min`` all-reduce of one slot per rank. So all ranks stop together -- never one
rank raising while the others wait for it in the next collective.

The trade-off: a bad loss is noticed up to ``log_every`` steps late (those steps run on NaN weights,
which harms nothing already lost); checking every step would cost a device->host sync per step. Set
``log_every=1`` to stop at once.

Checkpoints: a checkpoint is only ever written from finite state. Before each save the unread loss
window is checked the same way (one sync and one all-reduce per checkpoint, not per step), and so are the
parameters (``check_parameters``); either being NaN/inf stops the run there, so a NaN model never becomes
``latest`` and pruning never removes the last good checkpoint in its favour.

With fp16-mixed the loss scaler already skips steps whose gradients are not finite, and the decision
agrees across ranks (DDP all-reduces the gradients before the scaler checks them; FSDP2's DTensor
all-reduces the scaler's ``found_inf``), so there the run goes on and the skip is counted instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from gpulab.core.nonfinite import NonFiniteLossError

NEVER = 2**62  # "no bad step yet"; larger than any step count


class NonFiniteWatch:
    """Stops every rank together, naming the first step whose loss was NaN/inf on any rank."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def check(
        self,
        runtime: Any,
        logged_loss: float,
        first_bad_step: Callable[[], int | None],
        note: str = "",
    ) -> None:
        """Raise ``NonFiniteLossError`` on every rank if ``logged_loss`` (the all-reduced window mean,
        the same on every rank) is not finite; free otherwise. ``note`` is added to the message.

        ``first_bad_step`` gives this rank's first bad step in the window (or None). The collective that
        agrees on the step runs on every rank or on none, since all see the same loss.
        """
        if not self.enabled or math.isfinite(logged_loss):
            return
        mine = first_bad_step()
        per_rank = torch.full((runtime.world_size,), NEVER, dtype=torch.long, device=runtime.device)
        per_rank[runtime.rank] = NEVER if mine is None else mine
        steps = runtime.all_reduce(per_rank, "min").tolist()
        bad = {rank: step for rank, step in enumerate(steps) if step != NEVER}
        if not bad:
            return
        first = min(bad.values())
        ranks = ", ".join(str(rank) for rank, step in bad.items() if step == first)
        raise NonFiniteLossError(
            f"the training loss became NaN/inf at step {first} (on rank {ranks}); every rank stopped{note}. "
            "Lower the learning rate, set clip_grad_norm, or check the data for NaN/inf "
            "(fp16-mixed would skip such steps through its loss scaler instead of stopping)"
        )


def check_parameters(runtime: Any, model: torch.nn.Module, step: int) -> None:
    """Raise ``NonFiniteLossError`` on every rank if any rank holds a NaN/inf parameter (or shard).

    One kernel per parameter and one small collective: run before a checkpoint, never per step.
    """
    bad = next((name for name, p in model.named_parameters() if not _finite(p)), None)
    if not runtime.reduce_flag(bad is not None):
        return
    where = f" (first: {bad!r})" if bad is not None else " (on another rank)"
    raise NonFiniteLossError(
        f"the parameters became NaN/inf by step {step}{where}; every rank stopped and checkpoint "
        f"{step} was not written, so the last checkpoint stays the newest finite one. "
        "Lower the learning rate or set clip_grad_norm"
    )


def _finite(param: torch.Tensor) -> bool:
    local = param.to_local() if hasattr(param, "to_local") else param  # a DTensor shard: check our own
    return bool(torch.isfinite(local.detach()).all())
