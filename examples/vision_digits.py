"""The bundled 8x8 digits upscaled to RGB images, shared by the vision examples."""

import torch
from torch.nn import functional as F

from gpulab.engines.torch.recipes.digits import load_data

Split = tuple[torch.Tensor, torch.Tensor]


def upscaled_digits(size: int = 32) -> tuple[Split, Split]:
    """(train, val) as ``(images N x 3 x size x size, labels)``: what ImageNet-style models expect."""

    def grow(images: torch.Tensor) -> torch.Tensor:
        grown = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
        return grown.expand(-1, 3, -1, -1)

    (xt, yt), (xv, yv) = load_data(val_fraction=0.2, seed=0)
    return (grow(xt).contiguous(), yt), (grow(xv).contiguous(), yv)
