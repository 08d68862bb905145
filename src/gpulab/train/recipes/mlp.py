"""`mlp`: the classic 20-64-32-1 binary classifier on 10,000 synthetic samples.

Small enough that a step is launch- and Python-bound: the workload that shows framework overhead.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from gpulab.config import Settings, parse_config
from gpulab.train.recipes.base import Recipe, param_count


class MlpOptions(Settings):
    samples: int = Field(10_000, ge=100, description="synthetic samples (80% train, 20% validation)")
    features: int = Field(20, ge=1, description="input features")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate")
    data_seed: int = Field(1234, description="seed of the synthetic data (fixed, unlike the training seed)")


def make_model(features: int = 20) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))


def make_data(samples: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels from a fixed random hyperplane plus noise: learnable, not trivially separable."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, generator=g)
    y = ((x @ w + 0.5 * torch.randn(samples, generator=g)) > 0).float().unsqueeze(1)
    return x, y


def build(options: dict) -> Recipe:
    o = parse_config(MlpOptions, options, prefix="options.")
    x, y = make_data(o.samples, o.features, o.data_seed)
    cut = int(0.8 * o.samples)
    model = make_model(o.features)
    return Recipe(
        model=model,
        train_data=(x[:cut], y[:cut]),
        val_data=(x[cut:], y[cut:]),
        loss_fn=nn.BCEWithLogitsLoss(),
        optimizer=lambda params: torch.optim.Adam(params, lr=o.lr),
        defaults={"epochs": 5, "batch_size": 64},
        info={"parameters": param_count(model)},
    )
