"""The device seam: ``accelerator(device)`` -> the ``Accelerator`` that says what ``device`` can do
(streams, pinned memory, memory statistics and peaks, synchronisation, CUDA graphs, non-blocking copies,
autocast's device type), as Lightning Fabric's accelerators do. Code asks it instead of comparing
``device.type``; a new kind of device is one class here and a line in ``_CLASSES``."""

from __future__ import annotations

import functools

import torch

from gpulab.engines.torch.devices.base import Accelerator, MemoryStats
from gpulab.engines.torch.devices.cpu import CpuAccelerator
from gpulab.engines.torch.devices.cuda import CudaAccelerator
from gpulab.engines.torch.devices.mps import MpsAccelerator
from gpulab.engines.torch.devices.xpu import XpuAccelerator

_CLASSES: dict[str, type[Accelerator]] = {
    "cpu": CpuAccelerator,
    "cuda": CudaAccelerator,
    "mps": MpsAccelerator,
    "xpu": XpuAccelerator,
}


def accelerator(device: torch.device | str | int | Accelerator) -> Accelerator:
    """The seam of ``device`` (an ``Accelerator`` is returned as it is). One object per device name, found
    by a dictionary lookup once seen, so a caller on the hot path may ask again instead of keeping it."""
    if isinstance(device, Accelerator):
        return device
    found = _SEEN.get(device)
    if found is None:
        found = _SEEN[device] = _for(device if isinstance(device, str) else str(torch.device(device)))
    return found


_SEEN: dict[object, Accelerator] = {}  # as asked (a string, a torch.device, an index) -> its seam


@functools.cache
def _for(name: str) -> Accelerator:
    device = torch.device(name)
    return _CLASSES.get(device.type, Accelerator)(device)


__all__ = ["Accelerator", "CpuAccelerator", "CudaAccelerator", "MemoryStats", "MpsAccelerator", "accelerator"]
