"""Intel's XPU: work is queued (so a clock waits for it), one device per rank, collectives over XCCL."""

from __future__ import annotations

from typing import ClassVar

import torch

from gpulab.engines.torch.devices.base import Accelerator


class XpuAccelerator(Accelerator):
    process_group_backend: ClassVar[str | None] = "xccl"
    indexed_per_rank: ClassVar[bool] = True

    def synchronize(self) -> None:
        torch.xpu.synchronize(self.device)
