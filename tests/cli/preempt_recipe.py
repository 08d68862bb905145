"""A recipe for the preemption tests: dropout (so the random stream matters for exact resume) and a pause in
each forward pass (``options.pause`` seconds, after the first ``options.brisk`` passes), so a signal lands in
the middle of a run or of a step."""

from __future__ import annotations

import time

import torch
from torch import nn

from gpulab.core.recipes.base import Recipe


class SlowNet(nn.Module):
    def __init__(self, pause: float, brisk: int = 0) -> None:
        super().__init__()
        self.pause, self.brisk = pause, brisk  # brisk: forward passes before the pauses begin
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.brisk > 0:
            self.brisk -= 1
        else:
            time.sleep(self.pause)
        return self.net(x)


def build(options: dict) -> Recipe:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = (x.sum(1) > 0).long()
    return Recipe(
        model=SlowNet(float(options.get("pause", 0.005)), int(options.get("brisk", 0))),
        train_data=(x, y),
        loss_fn=nn.functional.cross_entropy,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2),
        defaults={"batch_size": 16, "log_every": 5, "tensorboard": False, "device": "cpu"},
    )
