"""``channels_last``: conv nets in the NHWC memory format, model and 4-D inputs alike.

On CUDA, cuDNN's fastest convolution kernels (Tensor Cores included) take NHWC, and a model converted
while its inputs stay NCHW pays a transpose per layer, so both are converted. ``auto`` turns it on only
for a model with 2-D convolutions on CUDA: on a CPU it is not known to be faster (oneDNN gains on some
parts and loses on others, and converting each batch costs a copy), so it stays off there unless set.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gpulab.engines.torch.data.transfer import map_tensors
from gpulab.engines.torch.devices import accelerator

_CONVS = (nn.Conv2d, nn.ConvTranspose2d)


def has_conv2d(model: nn.Module) -> bool:
    return any(isinstance(m, _CONVS) for m in model.modules())


def resolve_channels_last(setting: bool | str, model: nn.Module, device: torch.device) -> tuple[bool, str]:
    """(on?, why) for ``channels_last: true|false|auto``."""
    if setting is True:
        return True, "on (as set)"
    if setting is False:
        return False, "off (as set)"
    if not has_conv2d(model):
        return False, "off (auto: the model has no 2-D convolution)"
    if accelerator(device).channels_last_fast:
        return True, "on (auto: a conv net on CUDA, whose fastest convolution kernels take NHWC)"
    return False, (
        f"off (auto: a conv net on {device.type}, where channels_last is not known to be faster; "
        "channels_last: true turns it on)"
    )


def to_channels_last(model: nn.Module) -> nn.Module:
    """The model's 4-D parameters and buffers in channels_last, in place (like ``Module.to``)."""
    return model.to(memory_format=torch.channels_last)


def channels_last_batch(batch: Any) -> Any:
    """``batch`` with each 4-D floating tensor (an image batch) in channels_last; labels, masks and
    token ids stay as they are. A tensor already in that format is returned as is (no copy)."""

    def convert(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 4 and tensor.is_floating_point():
            return tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    return map_tensors(convert, batch)
