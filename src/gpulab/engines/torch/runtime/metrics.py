"""Metrics kept as device tensors and read only when logged, so no step waits on the host."""

from __future__ import annotations

from typing import Any

import torch


def correct_count(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """How many predictions are right, as a device tensor; None when accuracy has no meaning here.

    Integer targets with one more output dimension are class indices (argmax over the last dim, which
    also covers per-token targets); float targets with a single logit are binary labels (logit > 0).
    """
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if not targets.is_floating_point() and outputs.dim() == targets.dim() + 1:
        return (outputs.argmax(dim=-1) == targets).sum()
    if targets.is_floating_point() and outputs.shape == targets.shape and outputs.shape[-1:] in ((1,), ()):
        return ((outputs > 0) == (targets > 0.5)).sum()
    return None


class Mean:
    """A running mean of device scalars: ``add`` costs no sync, ``read`` costs one."""

    def __init__(self) -> None:
        self.total: torch.Tensor | None = None
        self.count = 0

    def add(self, value: torch.Tensor, weight: int = 1) -> None:
        # In place after the first call: one small kernel per step, no allocation.
        value = value.detach()
        if self.total is None:
            self.total = value.float() * weight
        else:
            self.total.add_(value, alpha=weight)
        self.count += weight

    def read(self, reduce=None) -> float | None:
        if self.total is None or self.count == 0:
            return None
        mean = self.total / self.count
        return float((reduce(mean) if reduce else mean).item())

    def reset(self) -> None:
        self.total, self.count = None, 0


class LossWindow:
    """The training losses since the last read, kept on the device with no kernel per micro-batch.

    ``add`` keeps a detached reference to the loss tensor the forward pass produced anyway (no copy, no
    kernel: a list append); ``mean`` reads the window once (one host sync, at log time only). NaN/inf
    detection needs nothing per step: a non-finite loss makes the mean non-finite, and only then does
    ``first_bad_step`` look for it.

    The logged figure is the mean over the window's optimizer steps of each step's loss, the large batch's:
    a step's loss is the mean of its micro-batches (over the ranks too), each weighed by its items when the
    loss is a mean over items (tokens, ``train/items.py``), as its gradient is. Averaging the micro-batches
    of the whole window instead weighed a step by its items or by its micro-batches (an epoch's short last
    window), so it differed from the large batch's figure whenever ``log_every`` > 1.

    A checkpoint keeps the window as each step's sums over every rank (``state_dict(reduce)``), which rank 0
    takes back (the other ranks hold zeros for those steps): the all-reduced mean then gives every step its
    loss over all ranks as the uninterrupted run did, with any number of ranks.
    """

    def __init__(self) -> None:
        self._losses: list[torch.Tensor] = []
        self._weights: list[torch.Tensor] = []
        self.steps: list[int] = []  # the optimizer step (1-based) each stored loss belongs to
        # Steps taken back from a checkpoint, all before ``steps``: their (loss x weight, weight) sums.
        self._kept_steps: list[int] = []
        self._kept: torch.Tensor | None = None  # [2, len(_kept_steps)]

    def add(self, loss: torch.Tensor, step: int, weight: torch.Tensor | None = None) -> None:
        self._losses.append(loss.detach())
        self.steps.append(step)
        if weight is not None:
            self._weights.append(weight.detach())

    def _values(self) -> torch.Tensor:
        return torch.stack(self._losses).float()

    def _weighted(self) -> bool:
        return bool(self._weights) and len(self._weights) == len(self._losses)

    def _step_sums(self) -> torch.Tensor:
        """[2, steps]: per optimizer step of the window, the sum of loss x weight and of the weights (a
        weight of 1 each micro-batch where the loss is no mean over items)."""
        parts = [] if self._kept is None else [self._kept]
        if self.steps:
            values = self._values()
            weights = (
                torch.stack(self._weights).float().to(values.device)
                if self._weighted()
                else torch.ones_like(values)
            )
            distinct = sorted(set(self.steps))
            column = {step: i for i, step in enumerate(distinct)}
            index = torch.tensor([column[s] for s in self.steps], device=values.device)
            sums = torch.zeros(2, len(distinct), device=values.device)
            sums[0].index_add_(0, index, values * weights)
            sums[1].index_add_(0, index, weights)
            parts.append(sums)
        device = parts[-1].device
        return torch.cat([p.to(device) for p in parts], dim=1)

    def mean(self, reduce=None) -> float | None:
        if not self.steps and not self._kept_steps:
            return None
        sums = self._step_sums()
        sums = reduce(sums) if reduce else sums  # a mean of both over the ranks keeps each step's ratio
        # A step with no weight here (a step taken back on rank 0 only, read without reduce) is left out.
        held = sums[1] > 0
        per_step = torch.where(held, sums[0] / sums[1].clamp(min=1e-12), torch.zeros_like(sums[0]))
        return float((per_step.sum() / held.sum().clamp(min=1)).item())

    def first_bad_step(self) -> int | None:
        """The step of the first non-finite loss in the window, or None (costs one host sync)."""
        if not self.steps and not self._kept_steps:
            return None
        bad = (~torch.isfinite(self._step_sums()[0])).nonzero()
        return (self._kept_steps + sorted(set(self.steps)))[int(bad[0, 0])] if len(bad) else None

    def reset(self) -> None:
        self._losses, self._weights, self.steps = [], [], []
        self._kept_steps, self._kept = [], None

    def state_dict(self, reduce=None) -> dict[str, Any]:
        """Each step's sums over every rank (``reduce``: a sum over the ranks; a collective, so every rank
        calls it), which rank 0 writes."""
        if not self.steps and not self._kept_steps:
            return {"steps": [], "sums": None}
        sums = self._step_sums()
        return {
            "steps": self._kept_steps + sorted(set(self.steps)),
            "sums": (reduce(sums) if reduce else sums).cpu(),
        }

    def load_state_dict(
        self, state: dict[str, Any] | None, device: torch.device, holder: bool = True
    ) -> None:
        """Take back a checkpoint's window: its sums where ``holder`` (rank 0), zeros for the same steps on
        the other ranks. A checkpoint from before the sums were kept holds rank 0's micro-batch losses,
        which every rank takes back as it did then."""
        self.reset()
        if not state:
            return
        if state.get("sums") is not None:
            sums = state["sums"].float().to(device)
            self._kept_steps = [int(s) for s in state["steps"]]
            self._kept = sums if holder else torch.zeros_like(sums)
        elif state.get("losses") is not None:
            weights = state.get("weights")  # absent in a checkpoint from before weights were kept
            weights = [None] * len(state["steps"]) if weights is None else weights.to(device)
            for loss, step, weight in zip(state["losses"].to(device), state["steps"], weights, strict=True):
                self.add(loss, int(step), weight)
