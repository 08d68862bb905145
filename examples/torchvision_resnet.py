"""torchvision's ResNet-18 (random init) on the bundled digits upscaled to 32x32 RGB.

    gpulab train examples.torchvision_resnet:build --max-steps 100

Needs a torchvision built for your torch (its C++ ops must load): on the CPU torch 2.13 this project
tests with, PyPI's torchvision 0.28 is a CUDA build and fails to import (see README, "Examples").
"""

import torch
import torchvision
from torch import nn

from examples.vision_digits import upscaled_digits
from gpulab import Recipe


def build(options: dict) -> Recipe:
    train, val = upscaled_digits(options.get("size", 32))
    model = torchvision.models.resnet18(num_classes=10)
    return Recipe(
        model=model,
        train_data=train,
        val_data=val,
        loss_fn=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=options.get("lr", 1e-3)),
        defaults={"batch_size": 64, "epochs": 3},
    )
