"""How the work is spread over processes and devices: one small class per strategy, registered by name.

=========  ==========================================================================================
name       what it does
=========  ==========================================================================================
single     one process, one device
ddp        one process per device, full replicas, gradients all-reduced during backward (DDP)
fsdp2      one process per device, parameters/gradients/optimizer state sharded (``fully_shard``)
dp         legacy ``nn.DataParallel``: one process driving every GPU (works, warns: ddp is faster)
=========  ==========================================================================================

``auto`` is ddp when the process was launched as one of several (torchrun's ``WORLD_SIZE`` > 1), else
single. The multi-process classes import ``torch.distributed`` pieces, so they load on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from gpulab.engines.torch.distributed.process_group import launched_world_size
from gpulab.engines.torch.runtime.strategies.base import REDUCE_OPS, Strategy, check_reduce_op
from gpulab.engines.torch.runtime.strategies.single import Single
from gpulab.errors import ConfigError, choices

# name -> "module:Class", imported when asked for (FSDP2 pulls in DTensor and the device mesh).
_REGISTRY = {
    "single": "gpulab.engines.torch.runtime.strategies.single:Single",
    "ddp": "gpulab.engines.torch.runtime.strategies.ddp:DDP",
    "fsdp2": "gpulab.engines.torch.runtime.strategies.fsdp:FSDP2",
    "dp": "gpulab.engines.torch.runtime.strategies.data_parallel:DataParallel",
}


class _LazyRegistry(Mapping):
    """``STRATEGIES[name]`` -> the class, imported on first access; iterating lists the names."""

    def __getitem__(self, name: str) -> type[Strategy]:
        module, _, cls = _REGISTRY[name].partition(":")
        return getattr(importlib.import_module(module), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


STRATEGIES: Mapping[str, type[Strategy]] = _LazyRegistry()


def strategy_choices() -> list[str]:
    return ["auto", *_REGISTRY]


def _auto_strategy(device: torch.device) -> tuple[str, str]:
    world = launched_world_size()
    if world > 1:
        return "ddp", f"launched as one of {world} processes: ddp, one replica per process"
    return "single", "one process on one device"


def resolve_strategy(name: str, device: torch.device | str, **options: Any) -> tuple[Strategy, str]:
    """Build the strategy called ``name`` (``"auto"``: the one that fits how we were launched) and say why.

    ``options`` go to the strategy's constructor (``collective_timeout_s``, ``ddp_bucket_cap_mb``, ...);
    each strategy ignores the ones that are not its own.
    """
    device = torch.device(device)
    if name == "auto":
        name, reason = _auto_strategy(device)
    else:
        reason = "requested"
    if name not in _REGISTRY:
        raise ConfigError(f"unknown strategy {name!r}; valid choices: {choices(strategy_choices())}")
    return STRATEGIES[name](device, **options), reason


__all__ = [
    "REDUCE_OPS",
    "STRATEGIES",
    "Single",
    "Strategy",
    "check_reduce_op",
    "resolve_strategy",
    "strategy_choices",
]
