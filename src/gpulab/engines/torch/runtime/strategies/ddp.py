"""``DDP``: one process per device, each with a full replica; gradients are all-reduced during backward.

DistributedDataParallel groups gradients into buckets (``bucket_cap_mb``) and all-reduces each bucket as
soon as backward has produced it, so communication overlaps the rest of backward. The options:

- ``gradient_as_bucket_view`` (on): gradients *are* views into the buckets, saving one copy and the
  memory of a second set of gradients.
- ``static_graph``: promise the set of used parameters never changes between steps; DDP then skips the
  per-step search for unused parameters and can reorder buckets after the first step.
- ``find_unused_parameters`` (off unless asked): needed only when some parameters get no gradient in a
  step (a branch not taken); finding them walks the autograd graph every step, which costs time.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.strategies.multiprocess import ProcessGroupStrategy


class DDP(ProcessGroupStrategy):
    name = "ddp"

    def __init__(
        self,
        device: torch.device | str,
        *,
        ddp_bucket_cap_mb: float = 25.0,
        ddp_static_graph: bool = False,
        ddp_gradient_as_bucket_view: bool = True,
        find_unused_parameters: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(device, **options)
        self.ddp_options = {
            "bucket_cap_mb": ddp_bucket_cap_mb,
            "static_graph": ddp_static_graph,
            "gradient_as_bucket_view": ddp_gradient_as_bucket_view,
            "find_unused_parameters": find_unused_parameters,
        }

    def setup_module(self, model: nn.Module) -> nn.Module:
        model = model.to(self.root_device)
        device_ids = accelerator(self.root_device).ddp_device_ids()
        # The constructor broadcasts rank 0's parameters and buffers, so every replica starts identical.
        with self.collective("DDP setup (broadcast of rank 0's parameters)"):
            return DistributedDataParallel(model, device_ids=device_ids, **self.ddp_options)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def no_sync(self, model: nn.Module) -> AbstractContextManager:
        return model.no_sync()
