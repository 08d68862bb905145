"""Apple's MPS: work is queued (so a clock waits for it), nothing else gpulab uses."""

from __future__ import annotations

import torch

from gpulab.engines.torch.devices.base import Accelerator


class MpsAccelerator(Accelerator):
    def synchronize(self) -> None:
        torch.mps.synchronize()
