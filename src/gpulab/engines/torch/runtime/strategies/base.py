"""The ``Strategy`` interface: how the work is spread over processes and devices.

The Runtime and the Trainer talk only to these methods and never ask *which* strategy is running. In one
process most of them are identities (``all_reduce``, ``no_sync``, ``barrier``, ``collective``); the
multi-process strategies (``multiprocess.py``) make them collectives, and the data-parallel wrappers
answer ``unwrap`` so checkpoints hold the user's own parameter names.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from gpulab.engines.torch.distributed.watchdog import Heartbeat
from gpulab.engines.torch.runtime.cuda_graph import STATIC_MARK, load_optimizer_in_place
from gpulab.engines.torch.runtime.fused_optimizer import match_loaded_groups
from gpulab.errors import choices

REDUCE_OPS = ("mean", "sum", "max", "min")
T = TypeVar("T")
_NOTHING = nullcontext()  # reusable: entering it allocates nothing


class Strategy:
    """The interface, with the one-process behaviour as the default of every collective.

    ``checkpoint_layout`` says how a checkpoint holds the model: ``"full"`` (rank 0 writes the whole
    model, identical on every rank) or ``"sharded"`` (every rank writes its shard through
    ``torch.distributed.checkpoint``).
    """

    name: ClassVar[str]
    checkpoint_layout: ClassVar[str] = "full"

    def __init__(self, device: torch.device | str, **_options: Any) -> None:
        self._device = torch.device(device)
        self.heartbeat = Heartbeat()  # the step and collective in progress, for the fault watchdog

    # -- who and where --------------------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        """The device this process computes on."""
        return self._device

    @property
    def rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_rank_zero(self) -> bool:
        """Only rank zero prints and writes shared files."""
        return self.rank == 0

    # -- setup ----------------------------------------------------------------------------------------
    def setup_precision(self, precision: Any) -> None:
        """Hook for strategies that carry the numeric policy themselves (FSDP2's mixed-precision policy)."""

    def setup_module(self, model: nn.Module) -> nn.Module:
        """Move (and, for data-parallel strategies, wrap) the model; returns what to train."""
        return model.to(self.root_device)

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Hook for strategies that shard or wrap optimizer state."""
        return optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever ``setup_module`` wrapped it in."""
        return model

    # -- the step -------------------------------------------------------------------------------------
    def no_sync(self, model: nn.Module) -> AbstractContextManager:
        """Skip gradient synchronisation (for all but the last micro-batch of an accumulation)."""
        return _NOTHING

    def collective(self, name: str, timeout_s: float | None = None) -> AbstractContextManager:
        """Mark a region that waits on the other ranks (for the stall diagnosis); free in one process."""
        return _NOTHING

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Clip the global gradient norm; returns the norm before clipping, as a tensor (no sync).

        A strategy where each rank holds a shard of the gradients must reduce the norm across ranks,
        which is why this lives here and not in the Runtime.
        """
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    # -- collectives ----------------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Combine ``tensor`` across processes with ``op`` (mean|sum|max|min); returns the result."""
        check_reduce_op(op)
        return tensor

    def reduce_flag(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is True on any rank (one small collective and a host sync)."""
        return bool(flag)

    def lagged_flag(self, flag: bool) -> bool:
        """``reduce_flag`` one call late, without waiting: True on every rank if ``flag`` was True on any rank
        at the previous call. Every rank must call it at the same points; a single process gets ``flag``."""
        return bool(flag)

    def barrier(self, name: str = "barrier") -> None:
        """Wait until every process gets here."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (a picklable object)."""
        return obj

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (a picklable object), in rank order, on every rank."""
        return [obj]

    def run_on_rank_zero(self, fn: Callable[[], T], *, name: str, timeout_s: float | None = None) -> T | None:
        """Run ``fn`` on rank 0 while the others wait for it; its result there, None elsewhere.

        If ``fn`` raises on rank 0, every rank raises. The others wait on the store, not in a collective,
        so ``timeout_s`` (a slow checkpoint write) may be longer than the collective timeout.
        """
        return fn()

    # -- checkpoint state -----------------------------------------------------------------------------
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's state under the user's parameter names (collective where sharded)."""
        return self.unwrap(model).state_dict()

    def optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        if getattr(optimizer, STATIC_MARK, False):  # a CUDA graph reads its tensors: copy into them
            load_optimizer_in_place(optimizer, state)
        else:
            optimizer.load_state_dict(state)
        match_loaded_groups(optimizer)

    def sharded_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's shard of model and optimizer state, for ``torch.distributed.checkpoint``."""
        raise NotImplementedError(f"strategy {self.name!r} keeps whole state; it has no sharded state")

    def load_sharded_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        raise NotImplementedError(f"strategy {self.name!r} keeps whole state; it has no sharded state")

    # -- lifetime -------------------------------------------------------------------------------------
    def teardown(self) -> None:
        """Release process groups and the like."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.root_device)!r}, world_size={self.world_size})"


def check_reduce_op(op: str) -> None:
    """Fail early (on CPU, in one process) for an op a distributed strategy would reject later."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; valid choices: {choices(REDUCE_OPS)}")
