"""The device seam: ``accelerator(device)`` -> the ``Accelerator`` that says what ``device`` can do
(streams, pinned memory, memory statistics and peaks, synchronisation, CUDA graphs, non-blocking copies,
autocast's device type, its process-group backend, its device per rank, fused optimizer kernels, auto
precision, compile modes worth tuning, timing events), as Lightning Fabric's accelerators do. Code asks it
instead of comparing ``device.type``; a new kind of device is one class in a file of its own here and a
line in ``_CLASSES`` (or ``register(kind, cls)`` from outside, as tests/engines/torch/devices does)."""

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


def register(kind: str, cls: type[Accelerator]) -> None:
    """``cls`` answers for devices of type ``kind`` (torch's name: ``torch.device(kind)``) from now on."""
    _CLASSES[kind] = cls
    _SEEN.clear()
    _for.cache_clear()


def kinds() -> dict[str, type[Accelerator]]:
    """Each known device type and its class (an error's list of valid choices reads this)."""
    return dict(_CLASSES)


@functools.cache
def _for(name: str) -> Accelerator:
    device = torch.device(name)
    return _CLASSES.get(device.type, Accelerator)(device)


__all__ = [
    "Accelerator",
    "CpuAccelerator",
    "CudaAccelerator",
    "MemoryStats",
    "MpsAccelerator",
    "XpuAccelerator",
    "accelerator",
    "kinds",
    "register",
]
