"""`digits`: a small CNN on scikit-learn's bundled 8x8 handwritten digits (real data, no download)."""

from __future__ import annotations

import torch
from torch import nn

from gpulab.config.validate import parse_config
from gpulab.core.recipes.base import Recipe, param_count
from gpulab.recipe_data import DigitsOptions, digits_data


def make_model(dropout: float = 0.25) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )  # fmt: skip


def load_data(val_fraction: float, seed: int):
    """``recipe_data.digits_data``'s split (the TensorFlow recipe's samples) as tensors sharing its memory."""
    return tuple(tuple(torch.from_numpy(a) for a in part) for part in digits_data(val_fraction, seed))


def build(options: dict) -> Recipe:
    o = parse_config(DigitsOptions, options, prefix="options.")
    train, val = load_data(o.val_fraction, o.split_seed)
    model = make_model(o.dropout)
    return Recipe(
        model=model,
        train_data=train,
        val_data=val,
        loss_fn=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay),
        scheduler=lambda opt, total_steps: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_steps),
        defaults={"epochs": 15, "batch_size": 64},
        info={"parameters": param_count(model), "train_samples": len(train[1]), "val_samples": len(val[1])},
    )
