"""``FSDP2``: parameters, gradients and optimizer state sharded over the ranks (``fully_shard``).

Each rank keeps 1/N of every sharded parameter; a module's full parameters are all-gathered just before
its forward (and again for backward), and gradients are reduce-scattered so each rank receives only the
shard it updates. Sharding each block separately (``fsdp_shard_modules``, by class name; by default every
module held in an ``nn.ModuleList``, the usual container of transformer blocks) keeps only one block's
full parameters alive at a time and overlaps its all-gather with the previous block's compute.

Mixed precision belongs to FSDP2 itself here: the Precision's compute dtype becomes the
``MixedPrecisionPolicy`` parameter dtype (the all-gathered copies), and gradients are reduced in fp32.
The sharded parameters -- what the optimizer updates -- stay fp32. With fp16 the GradScaler's overflow
check runs on DTensor shards, and DTensor all-reduces its ``found_inf`` (a max), so every rank skips the
same steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from gpulab.engines.torch.runtime.strategies.multiprocess import ProcessGroupStrategy
from gpulab.errors import ConfigError


class FSDP2(ProcessGroupStrategy):
    name = "fsdp2"
    checkpoint_layout = "sharded"

    def __init__(
        self,
        device: torch.device | str,
        *,
        fsdp_shard_modules: Sequence[str] = (),
        fsdp_reshard_after_forward: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(device, **options)
        self.shard_modules = tuple(fsdp_shard_modules)
        self.reshard_after_forward = fsdp_reshard_after_forward
        self.mp_policy = MixedPrecisionPolicy()

    def setup_precision(self, precision: Any) -> None:
        dtype = getattr(precision, "compute_dtype", None)
        if dtype is not None:
            self.mp_policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    def setup_module(self, model: nn.Module) -> nn.Module:
        model = model.to(self.root_device)
        mesh = init_device_mesh(self.root_device.type, (self.world_size,))
        options = {"mesh": mesh, "mp_policy": self.mp_policy}
        with self.collective("FSDP2 setup (sharding parameters)"):
            for block in self._blocks(model):
                fully_shard(block, reshard_after_forward=self.reshard_after_forward, **options)
            fully_shard(model, **options)  # the root: whatever no block owns, and the forward hooks
        return model

    def _blocks(self, model: nn.Module) -> list[nn.Module]:
        if self.shard_modules:
            found = [m for m in model.modules() if type(m).__name__ in self.shard_modules]
            missing = set(self.shard_modules) - {type(m).__name__ for m in found}
            if missing:
                raise ConfigError(
                    f"fsdp_shard_modules: no module of class {', '.join(sorted(missing))} in the model"
                )
            return [m for m in found if m is not model]
        return [child for m in model.modules() if isinstance(m, nn.ModuleList) for child in m]

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if not all(isinstance(p, DTensor) for p in params):
            raise ConfigError(
                "with strategy fsdp2 the optimizer must be built after sharding: pass a factory "
                "(lambda params: torch.optim.AdamW(params, ...)) instead of an optimizer instance"
            )
        return optimizer

    @contextmanager
    def _no_sync(self, model: FSDPModule) -> Iterator[None]:
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def no_sync(self, model: nn.Module):
        return self._no_sync(model)

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        # Over DTensor gradients the norm is reduced across the shards; hand back a plain tensor.
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model, gathered (a collective); complete on rank 0, empty elsewhere."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        with self.collective("FSDP2 gather of the full model state"):
            return get_model_state_dict(model, options=options)

    def sharded_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return {
            "model": get_model_state_dict(model),
            "optimizer": get_optimizer_state_dict(model, optimizer),
        }

    def load_sharded_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
