"""`mlp`: the classic 20-64-32-1 binary classifier on 10,000 synthetic samples.

Small enough that a step is launch- and Python-bound: the workload that shows framework overhead.
"""

from __future__ import annotations

import torch
from torch import nn

from gpulab.config.validate import parse_config
from gpulab.core.recipes.base import Recipe, param_count
from gpulab.recipe_data import MlpOptions, mlp_data


def make_model(features: int = 20) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))


def make_data(samples: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``recipe_data.mlp_data``'s arrays (the TensorFlow recipe's samples) as tensors sharing their memory."""
    x, y = mlp_data(samples, features, seed)
    return torch.from_numpy(x), torch.from_numpy(y)


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
