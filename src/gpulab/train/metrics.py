"""Metrics kept as device tensors and read only when logged, so no step waits on the host."""

from __future__ import annotations

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
