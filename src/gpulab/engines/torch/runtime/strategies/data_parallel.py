"""``DataParallel``: the legacy one-process, many-GPU wrapper. It runs, and says why DDP is faster."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.strategies.base import Strategy

SLOWER_THAN_DDP = (
    "strategy dp (torch.nn.DataParallel) is slower than ddp: one Python process drives every GPU, so "
    "the GIL serialises the replicas' work; every step re-copies the model from the first GPU to the "
    "others and gathers all outputs back onto it, which makes that GPU the bottleneck and its memory "
    "the limit; and gradients are summed only after the whole backward. DDP runs one process per GPU "
    "and overlaps the gradient all-reduce with backward: launch with `gpulab launch --nproc-per-node N "
    "-- ...` and strategy ddp (or auto)."
)


class DataParallelPerformanceWarning(UserWarning):
    """A setting that works but leaves speed on the table."""


class DataParallel(Strategy):
    """``nn.DataParallel`` over every visible GPU (on a CPU-only machine it simply calls the module).

    One process, so ``world_size`` is 1 and the batch size is the batch over all GPUs together.
    """

    name = "dp"

    def __init__(self, device: torch.device | str, **options: Any) -> None:
        super().__init__(device, **options)
        warnings.warn(SLOWER_THAN_DDP, DataParallelPerformanceWarning, stacklevel=3)

    def setup_module(self, model: nn.Module) -> nn.Module:
        model = model.to(self.root_device)
        if not accelerator(self.root_device).data_parallel:
            # Nothing to replicate on: the module runs as is. (nn.DataParallel(device_ids=[]) would only
            # pass through where torch sees no GPU at all; on a GPU machine it fails on device_ids[0].)
            return model
        first = self.root_device.index or 0  # outputs and the master copy live on the first id
        device_ids = [first] + [i for i in range(torch.cuda.device_count()) if i != first]
        return AutocastDataParallel(model, device_ids=device_ids)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, nn.DataParallel) else model


class AutocastDataParallel(nn.DataParallel):
    """``nn.DataParallel`` whose replicas compute in the caller's autocast dtype.

    torch's ``parallel_apply`` runs each replica in a thread of its own under
    ``torch.amp.autocast(device_type, enabled=...)`` -- without a dtype. Autocast's dtype is per thread
    and defaults to float16 on CUDA, so under bf16-mixed every replica computed in fp16, with no loss
    scaler. Each replica re-enters autocast with the dtype (and on/off) of the thread that called
    ``forward``: the Precision's.
    """

    def parallel_apply(self, replicas, inputs, kwargs):
        accelerator = torch.accelerator.current_accelerator()
        device_type = accelerator.type if accelerator is not None else "cpu"
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type)
        wrapped = [_InAutocast(replica, device_type, dtype, enabled) for replica in replicas]
        return super().parallel_apply(wrapped, inputs, kwargs)


class _InAutocast:
    """Calls ``module`` under ``torch.autocast(device_type, dtype, enabled)`` (in whichever thread)."""

    __slots__ = ("module", "device_type", "dtype", "enabled")

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype, enabled: bool) -> None:
        self.module, self.device_type, self.dtype, self.enabled = module, device_type, dtype, enabled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled):
            return self.module(*args, **kwargs)
