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
    kernel: a list append); ``mean`` stacks the window and reads it once (one host sync, at log time
    only). NaN/inf detection needs nothing per step: a non-finite loss makes the mean non-finite, and
    only then does ``first_bad_step`` look for it.

    A loss that is a mean over items (tokens, ``train/items.py``) comes with its items as ``weight``: the
    window's mean is then weighted by them (over the ranks too), the large batch's loss as its gradient
    is -- not the plain mean of micro-batch means.
    """

    def __init__(self) -> None:
        self._losses: list[torch.Tensor] = []
        self._weights: list[torch.Tensor] = []
        self.steps: list[int] = []  # the optimizer step (1-based) each stored loss belongs to

    def add(self, loss: torch.Tensor, step: int, weight: torch.Tensor | None = None) -> None:
        self._losses.append(loss.detach())
        self.steps.append(step)
        if weight is not None:
            self._weights.append(weight.detach())

    def _values(self) -> torch.Tensor:
        return torch.stack(self._losses).float()

    def _weighted(self) -> bool:
        return bool(self._weights) and len(self._weights) == len(self._losses)

    def mean(self, reduce=None) -> float | None:
        if not self.steps:
            return None
        if not self._weighted():
            mean = self._values().mean()
            return float((reduce(mean) if reduce else mean).item())
        weights = torch.stack(self._weights).float().to(self._losses[0].device)
        pair = torch.stack([(self._values() * weights).sum(), weights.sum()])
        pair = reduce(pair) if reduce else pair  # a mean of both over the ranks keeps their ratio
        return float((pair[0] / pair[1].clamp(min=1e-12)).item())

    def first_bad_step(self) -> int | None:
        """The step of the first non-finite loss in the window, or None (costs one host sync)."""
        if not self.steps:
            return None
        bad = (~torch.isfinite(self._values())).nonzero()
        return self.steps[int(bad[0, 0])] if len(bad) else None

    def reset(self) -> None:
        self._losses, self._weights, self.steps = [], [], []

    def state_dict(self) -> dict[str, Any]:
        weights = torch.stack(self._weights).float().cpu() if self._weighted() and self.steps else None
        return {
            "losses": self._values().cpu() if self.steps else None,
            "steps": list(self.steps),
            "weights": weights,
        }

    def load_state_dict(self, state: dict[str, Any] | None, device: torch.device) -> None:
        self.reset()
        if state and state.get("losses") is not None:
            weights = state.get("weights")  # absent in a checkpoint from before weights were kept
            weights = [None] * len(state["steps"]) if weights is None else weights.to(device)
            for loss, step, weight in zip(state["losses"].to(device), state["steps"], weights, strict=True):
                self.add(loss, int(step), weight)
