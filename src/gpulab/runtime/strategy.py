"""How the work is spread over processes and devices: one small class per strategy, registered by name.

``Strategy`` is the interface the Runtime and the Trainer talk to; they never ask *which* strategy is
running. ``Single`` is one process on one device. DDP and FSDP2 slot in later behind the same methods:
the ones that are identities here (``all_reduce``, ``no_sync``, ``barrier``) become collectives there,
and ``root_device`` is where a multi-process strategy picks ``cuda:LOCAL_RANK``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
from torch import nn

from gpulab.errors import ConfigError, choices

REDUCE_OPS = ("mean", "sum")


class Strategy:
    """The interface. Subclasses say how many processes there are and how modules/tensors are shared."""

    name: ClassVar[str]

    def __init__(self, device: torch.device | str) -> None:
        self._device = torch.device(device)

    @property
    def root_device(self) -> torch.device:
        """The device this process computes on."""
        return self._device

    @property
    def rank(self) -> int:
        raise NotImplementedError

    @property
    def local_rank(self) -> int:
        raise NotImplementedError

    @property
    def world_size(self) -> int:
        raise NotImplementedError

    @property
    def is_rank_zero(self) -> bool:
        """Only rank zero prints and writes shared files."""
        return self.rank == 0

    def setup_module(self, model: nn.Module) -> nn.Module:
        """Move (and, for data-parallel strategies, wrap) the model; returns what to train."""
        raise NotImplementedError

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Hook for strategies that shard or wrap optimizer state."""
        return optimizer

    def no_sync(self, model: nn.Module) -> AbstractContextManager:
        """Skip gradient synchronisation (for all but the last micro-batch of an accumulation)."""
        raise NotImplementedError

    def all_reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Combine ``tensor`` across processes with ``op`` (mean|sum); returns the result."""
        raise NotImplementedError

    def barrier(self) -> None:
        """Wait until every process gets here."""
        raise NotImplementedError

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (a picklable object)."""
        raise NotImplementedError

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Clip the global gradient norm; returns the norm before clipping, as a tensor (no sync).

        A strategy where each rank holds a shard of the gradients must reduce the norm across ranks,
        which is why this lives here and not in the Runtime.
        """
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def teardown(self) -> None:
        """Release process groups and the like."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.root_device)!r})"


def check_reduce_op(op: str) -> None:
    """Fail early (on CPU, in one process) for an op a distributed strategy would reject later."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; valid choices: {choices(REDUCE_OPS)}")


class Single(Strategy):
    """One process, one device: every collective is the identity."""

    name = "single"

    @property
    def rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def setup_module(self, model: nn.Module) -> nn.Module:
        return model.to(self.root_device)

    def no_sync(self, model: nn.Module) -> AbstractContextManager:
        return nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        check_reduce_op(op)
        return tensor

    def barrier(self) -> None:
        pass

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj


STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (Single,)}


def _auto_strategy(device: torch.device) -> tuple[str, str]:
    # Multi-process strategies will read torchrun's WORLD_SIZE here; until then it is one process.
    return "single", "one process on one device"


def strategy_choices() -> list[str]:
    return ["auto", *STRATEGIES]


def resolve_strategy(name: str, device: torch.device | str) -> tuple[Strategy, str]:
    """Build the strategy called ``name`` (``"auto"``: the one that fits how we were launched) and say why."""
    device = torch.device(device)
    if name == "auto":
        name, reason = _auto_strategy(device)
    else:
        reason = "requested"
    cls = STRATEGIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown strategy {name!r}; valid choices: {choices(strategy_choices())}")
    return cls(device), reason
