"""``Runtime``: device x precision x strategy behind one small object, used the way Lightning Fabric is.

A hand-written loop becomes portable by routing five calls through it::

    rt = Runtime(precision="auto")
    model, opt = rt.setup(model, lambda params: torch.optim.AdamW(params, lr=3e-4))
    for batch in loader:
        x, y = rt.to_device(batch)
        with rt.autocast():
            loss = loss_fn(model(x), y)
        rt.backward(loss)
        rt.clip_grad_norm(model, opt, 1.0)
        rt.step(opt)

The Runtime only combines; what changes per precision lives in ``precision.py`` and what changes per
strategy in ``strategies/``, so nothing here branches on either.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from gpulab.engines.torch.data.transfer import to_device
from gpulab.engines.torch.devices import Accelerator, accelerator
from gpulab.engines.torch.runtime.attention import resolve_attention
from gpulab.engines.torch.runtime.fused_optimizer import use_fused_kernels
from gpulab.engines.torch.runtime.fused_step import clear_grads, direct_step
from gpulab.engines.torch.runtime.memory import memory_limit_bytes
from gpulab.engines.torch.runtime.memory_estimate import unwrap_module
from gpulab.engines.torch.runtime.precision import Precision, resolve_precision, slow_precision_warning
from gpulab.engines.torch.runtime.seed import seed_everything
from gpulab.engines.torch.runtime.strategies import Strategy, resolve_strategy
from gpulab.errors import DeviceMemoryError, GpulabWarning
from gpulab.hardware.devices import select_device

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class Runtime:
    """Resolve ``device``, ``precision`` and ``strategy`` (each ``"auto"`` by default) and apply them.

    ``precision`` and ``strategy`` may also be ready-made ``Precision``/``Strategy`` objects;
    ``precision_options`` (``init_scale``, ``growth_interval``) configure the fp16 loss scaler and
    ``strategy_options`` the strategy (``collective_timeout_s``, ``ddp_bucket_cap_mb``, ...).
    ``attention`` picks the kernel torch's scaled_dot_product_attention tries first (``attention.py``).
    ``fuse_optimizer`` lets ``setup`` switch torch's Adam/AdamW/SGD to their fused kernels where you left
    that choice open (``fused_optimizer.py``); ``describe()`` says what it did.
    The precision's process-wide settings (TF32 flags) and the attention order are applied here and undone
    by ``teardown()`` or on leaving a ``with Runtime(...)`` block.
    """

    def __init__(
        self,
        device: str | torch.device = "auto",
        precision: str | Precision = "auto",
        strategy: str | Strategy = "auto",
        *,
        precision_options: Mapping[str, Any] | None = None,
        strategy_options: Mapping[str, Any] | None = None,
        fuse_optimizer: bool = True,
        attention: str = "auto",
    ) -> None:
        choice = select_device(str(device))
        self.strategy, strategy_reason = _given_or(
            strategy, resolve_strategy, choice.device, **dict(strategy_options or {})
        )
        # The strategy owns the device: a multi-process one picks this rank's GPU.
        self.precision, precision_reason = _given_or(
            precision, resolve_precision, self.device, **dict(precision_options or {})
        )
        self.attention = resolve_attention(attention)
        self._reasons = {
            "device": choice.reason,
            "precision": precision_reason,
            "strategy": strategy_reason,
            "attention": self.attention.reason,
        }
        slow = slow_precision_warning(self.precision, self.device)  # auto never picks one: asked for
        if slow and self.is_rank_zero:  # the run's diagnosis names it again, with fp32 as the fix
            warnings.warn(slow, GpulabWarning, stacklevel=2)
        self.fuse_optimizer = fuse_optimizer
        self._plain_step = type(self.precision).step is Precision.step
        self._no_sync_depth = 0  # inside ``no_sync``: backward talks to no other rank
        self.precision.setup()
        self.attention.setup()
        self.strategy.setup_precision(self.precision)

    # -- who and where --------------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, s: Any) -> Runtime:
        """The Runtime a run's ``TrainerSettings`` describe: the one the Trainer, ``gpulab profile`` and
        ``gpulab tune`` build, so a profiled or tuned step is the trained one."""
        return cls(
            s.device,
            s.precision,
            s.strategy,
            precision_options={"init_scale": s.init_scale, "growth_interval": s.growth_interval},
            strategy_options={
                "collective_timeout_s": s.collective_timeout_s,
                "ddp_bucket_cap_mb": s.ddp_bucket_cap_mb,
                "ddp_static_graph": s.ddp_static_graph,
                "ddp_gradient_as_bucket_view": s.ddp_gradient_as_bucket_view,
                "find_unused_parameters": s.find_unused_parameters,
                "fsdp_shard_modules": s.fsdp_shard_modules,
                "fsdp_reshard_after_forward": s.fsdp_reshard_after_forward,
            },
            fuse_optimizer=s.fuse_optimizer,
            attention=s.attention,
        )

    @property
    def device(self) -> torch.device:
        return self.strategy.root_device

    @property
    def accelerator(self) -> Accelerator:
        """What this process's device can do (the device seam: ``engines/torch/devices``)."""
        return accelerator(self.strategy.root_device)

    @property
    def rank(self) -> int:
        return self.strategy.rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def is_rank_zero(self) -> bool:
        return self.strategy.is_rank_zero

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (counted by ``step``); the fault watchdog reports it. A loop that
        resumes sets it once."""
        return self.strategy.heartbeat.step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.strategy.heartbeat.step = int(value)

    @property
    def skips_nonfinite_steps(self) -> bool:
        """Whether the precision skips optimizer steps with inf/NaN gradients by itself (fp16's loss
        scaler); otherwise a non-finite loss is the loop's to stop on."""
        return getattr(self.precision, "scaler", None) is not None

    def describe(self) -> dict[str, Any]:
        """What was chosen and why, for logs and ``summary.json``."""
        return {
            "device": str(self.device),
            "precision": self.precision.name,
            "strategy": self.strategy.name,
            "attention": self.attention.name,
            "world_size": self.world_size,
            "reasons": dict(self._reasons),
        }

    # -- setup ----------------------------------------------------------------------------------------
    def setup(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | OptimizerFactory | None = None
    ) -> tuple[nn.Module, torch.optim.Optimizer | None]:
        """Move/wrap ``model`` for the strategy and prepare ``optimizer``.

        A factory ``params -> Optimizer`` is called *after* the move, so the optimizer holds the
        parameters that will really be trained (a wrapping strategy may replace them). A factory whose
        first parameter is named ``model`` gets the user's module instead (inside DDP, with its own
        parameter names), so weight-decay groups by name need no closure. An optimizer
        instance keeps working after a plain move because ``Module.to`` changes parameters in place.
        """
        try:
            model = self.strategy.setup_module(model)
        except torch.OutOfMemoryError:
            raise DeviceMemoryError(_model_does_not_fit(model, self.device)) from None
        if optimizer is None:
            return model, None
        if not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = optimizer(unwrap_module(model) if takes_model(optimizer) else model.parameters())
        optimizer = self.strategy.setup_optimizer(optimizer)
        if self.fuse_optimizer:
            self._reasons["optimizer"] = use_fused_kernels(optimizer)
        return model, optimizer

    def to_device(self, batch: Any) -> Any:
        """``batch`` with every tensor moved to this device, through nested tuples, lists and dicts."""
        return to_device(batch, self.device)

    # -- the training step ----------------------------------------------------------------------------
    def autocast(self) -> AbstractContextManager:
        """Wrap the forward pass and the loss in this."""
        return self.precision.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        # Marked as a collective: a data-parallel strategy all-reduces gradients inside backward. Not
        # under ``no_sync``, where it does not: every rank must count the same collectives for the stall
        # watchdog, and a rank that ran out of memory early (``micro_batch: auto``) ran fewer micro-batches.
        if self._no_sync_depth:
            self.precision.backward(loss)
            return
        with self.strategy.collective("backward (gradient sync)"):
            self.precision.backward(loss)

    def no_sync(self, model: nn.Module, enabled: bool = True) -> AbstractContextManager:
        """Skip gradient sync for accumulation micro-batches; ``enabled=False`` syncs as usual."""
        return self._no_sync(model) if enabled else nullcontext()

    @contextmanager
    def _no_sync(self, model: nn.Module):
        self._no_sync_depth += 1
        try:
            with self.strategy.no_sync(model):
                yield
        finally:
            self._no_sync_depth -= 1

    def clip_grad_norm(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float
    ) -> torch.Tensor:
        """Clip gradients to a global norm of ``max_norm``; returns the norm before clipping.

        The norm stays a device tensor (read it only when logging, to avoid a sync every step). With
        fp16 the gradients are unscaled first, so ``max_norm`` means the true gradient norm.
        """
        self.precision.unscale(optimizer)
        return self.strategy.clip_grad_norm(model, max_norm)

    def step(self, optimizer: torch.optim.Optimizer, scheduler: Any | None = None) -> None:
        """Optimizer step (through the precision), zero the gradients, then step ``scheduler`` if given.

        The scheduler steps even when fp16 skipped an overflowing step: knowing whether it did would
        cost a host sync each step, and the few early skips only shift the schedule by as many steps.
        """
        # The fused update called directly where that is exactly what step() would run (fused_step.py);
        # a precision with its own step (fp16's GradScaler) always goes through it.
        if self._plain_step and direct_step(optimizer):
            clear_grads(optimizer)  # what zero_grad(set_to_none=True) does for Adam, less its profiler range
        else:
            self.precision.step(optimizer)
            optimizer.zero_grad(set_to_none=True)  # None, not zeros: saves a memset and memory
        if scheduler is not None:
            scheduler.step()
        self.strategy.heartbeat.step += 1

    # -- processes ------------------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on rank zero only, so N processes do not print N copies."""
        if self.is_rank_zero:
            print(*args, **kwargs)

    def barrier(self) -> None:
        self.strategy.barrier()

    def all_reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """``tensor`` combined over all processes with ``op`` (mean|sum|max|min)."""
        return self.strategy.all_reduce(tensor, op)

    def reduce_flag(self, flag: bool) -> bool:
        """True on every process if ``flag`` is True on any (one small collective)."""
        return self.strategy.reduce_flag(flag)

    def lagged_flag(self, flag: bool) -> bool:
        """``reduce_flag`` one call late and without waiting (for a check made every step)."""
        return self.strategy.lagged_flag(flag)

    seed_everything = staticmethod(seed_everything)

    # -- lifetime -------------------------------------------------------------------------------------
    def teardown(self) -> None:
        """Undo the precision's global settings and the attention order; release the strategy's resources."""
        self.precision.teardown()
        self.attention.teardown()
        self.strategy.teardown()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def __repr__(self) -> str:
        d = self.describe()
        return f"Runtime(device={d['device']!r}, precision={d['precision']!r}, strategy={d['strategy']!r})"


def _given_or(value: Any, resolve: Callable[..., tuple[Any, str]], *args: Any, **kwargs: Any):
    """A ready-made Precision/Strategy is used as given; a name goes through its registry."""
    return (value, "given") if not isinstance(value, str) else resolve(value, *args, **kwargs)


def _model_does_not_fit(model: nn.Module, device: torch.device) -> str:
    """One line for an out-of-memory error while the model moves to its device."""
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    limit = memory_limit_bytes(device)
    under = f" under memory_limit {limit / 2**20:,.1f} MiB" if limit else ""
    fix = "raise memory_limit (a fraction such as 0.9, or bytes)" if limit else "free the device"
    return (
        f"the model's parameters and buffers ({size / 2**20:,.1f} MiB) do not fit on {device}{under}; "
        f"{fix}, or shard it (strategy fsdp2)"
    )


def takes_model(factory: Callable) -> bool:
    """Whether an optimizer factory wants the model (its first parameter is named ``model``), not the
    parameters."""
    try:
        first = next(iter(inspect.signature(factory).parameters), None)
    except (TypeError, ValueError):  # no signature to read (a builtin): the usual params -> Optimizer
        return False
    return first == "model"
