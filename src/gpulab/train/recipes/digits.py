"""`digits`: a small CNN on scikit-learn's bundled 8x8 handwritten digits (real data, no download)."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from gpulab.config import Settings, parse_config
from gpulab.train.recipes.base import Recipe, param_count


class DigitsOptions(Settings):
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (cosine-annealed to zero)")
    weight_decay: float = Field(1e-4, ge=0, description="AdamW weight decay")
    dropout: float = Field(0.25, ge=0, lt=1, description="dropout before the classifier")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="held-out share, stratified by class")
    split_seed: int = Field(0, description="seed of the train/validation split")


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
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # pixel values are 0..16
    y = torch.tensor(digits.target, dtype=torch.long)
    idx = torch.arange(len(y)).numpy()
    tr, va = train_test_split(idx, test_size=val_fraction, random_state=seed, stratify=y.numpy())
    return (x[tr], y[tr]), (x[va], y[va])


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
