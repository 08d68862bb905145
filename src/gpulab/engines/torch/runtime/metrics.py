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
    """

    def __init__(self) -> None:
        self._losses: list[torch.Tensor] = []
        self.steps: list[int] = []  # the optimizer step (1-based) each stored loss belongs to

    def add(self, loss: torch.Tensor, step: int) -> None:
        self._losses.append(loss.detach())
        self.steps.append(step)

    def _values(self) -> torch.Tensor:
        return torch.stack(self._losses).float()

    def mean(self, reduce=None) -> float | None:
        if not self.steps:
            return None
        mean = self._values().mean()
        return float((reduce(mean) if reduce else mean).item())

    def first_bad_step(self) -> int | None:
        """The step of the first non-finite loss in the window, or None (costs one host sync)."""
        if not self.steps:
            return None
        bad = (~torch.isfinite(self._values())).nonzero()
        return self.steps[int(bad[0, 0])] if len(bad) else None

    def reset(self) -> None:
        self._losses, self.steps = [], []

    def state_dict(self) -> dict[str, Any]:
        return {"losses": self._values().cpu() if self.steps else None, "steps": list(self.steps)}

    def load_state_dict(self, state: dict[str, Any] | None, device: torch.device) -> None:
        self.reset()
        if state and state.get("losses") is not None:
            for loss, step in zip(state["losses"].to(device), state["steps"], strict=True):
                self.add(loss, int(step))
