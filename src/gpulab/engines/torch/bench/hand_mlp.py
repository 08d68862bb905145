"""The peer gpulab's mlp step is measured against: the seed's training loop (issue 24) as a user writes it,
with nothing of gpulab in it (only torch is imported).

``DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)``, default ``torch.optim.Adam`` (lr 1e-3; on
a CPU its for-loop kernels), ``BCEWithLogitsLoss``, each batch copied to the device inside the loop. One
definition serves both places that time it: ``benchmarks/overhead.py`` (the whole job, fresh processes)
and ``gpulab bench compile`` (its ``hand-written`` row, per step, beside gpulab's variants).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SeedLoop:
    """The loop's objects (optimizer, loss, loader: its set-up) and its body, ``step``.

    ``model`` is already on ``device``, as the user's script builds it before the loop."""

    def __init__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        device: torch.device,
        *,
        batch_size: int = 64,
        lr: float = 1e-3,
    ) -> None:
        self.model, self.device = model, device
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)
        self.loss_fn = nn.BCEWithLogitsLoss()
        self.loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """One pass of ``for xb, yb in loader:``'s body."""
        xb, yb = xb.to(self.device), yb.to(self.device)
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The loader's batches epoch after epoch (each epoch reshuffled), for as many steps as asked."""
        while True:
            yield from self.loader

    def next_step(self, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The next batch from ``batches`` and its step: one iteration of the user's loop, loader included."""
        return self.step(*next(batches))
