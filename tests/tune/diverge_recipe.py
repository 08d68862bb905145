"""A recipe whose loss is a sum over the batch (``reduction="sum"``), so its gradient grows with the batch:
with SGD at lr 0.02 batches of 16 and 32 train, batches of 64 and more diverge (the step overshoots)."""

import torch
from torch import nn

from gpulab.core.recipes.base import Recipe


def build(options):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    return Recipe(
        model=nn.Linear(8, 1),
        train_data=(x[:384], y[:384]),
        val_data=(x[384:], y[384:]),
        loss_fn=nn.MSELoss(reduction="sum"),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.02),
        defaults={"batch_size": 16, "device": "cpu"},
    )
