"""A timm Vision Transformer (random init, 8x8 patches, tiny by default) on the digits upscaled to 32x32.

    gpulab train examples.timm_vit:build --max-steps 100 --set activation_checkpointing=Block

timm imports torchvision, so it runs where a torchvision built for your torch does (see README, "Examples").
"""

import timm
import torch
from torch import nn

from examples.vision_digits import upscaled_digits
from gpulab import Recipe


def build(options: dict) -> Recipe:
    train, val = upscaled_digits(32)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=8, num_heads=4,
        embed_dim=options.get("embed_dim", 64), depth=options.get("depth", 2),
    )  # fmt: skip
    return Recipe(
        model=model,
        train_data=train,
        val_data=val,
        loss_fn=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=options.get("lr", 1e-3)),
        defaults={"batch_size": 64, "epochs": 3},
    )
