"""torch.compile with a clean fallback, and activation checkpointing for chosen module types."""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator
from gpulab.errors import ConfigError, choices


class ModelAndLoss(nn.Module):
    """``loss(model(*args, **kwargs), batch)``: what one training micro-batch computes, as one module for
    torch.compile. It holds the user's model (not a copy), so the parameters are the model's own."""

    def __init__(self, model: nn.Module, loss: Callable[[Any, Any], torch.Tensor]) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, args: tuple, kwargs: dict[str, Any], batch: Any) -> torch.Tensor:
        return self.loss(self.model(*args, **kwargs), batch)


class CompileFallback(nn.Module):
    """Calls the compiled model; if compiling fails, warns once and runs the eager model from then on.

    torch.compile is lazy: errors surface at the first call, not at ``torch.compile()``, so the guard
    sits around the call. The eager and compiled callables share parameters, so nothing is lost.

    Only a compilation error falls back (``is_compile_error``). Anything else -- above all running out of
    memory, which ``micro_batch: auto``'s OOM guard must see to shrink the step -- passes through with
    compilation still on: an OOM says nothing about the compiler.
    """

    def __init__(
        self, model: nn.Module, compiled, recompile: Callable[[nn.Module], Any] | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self._compiled = compiled
        self._recompile = recompile  # torch.compile with this model's mode, backend and options
        self._with_loss: Any = None  # the training step's forward and loss as one region (fuse_loss)
        self.fell_back = False
        self.reason: str | None = None  # why it fell back, for summary.json

    def fuse_loss(self, loss: Callable[[Any, Any], torch.Tensor]) -> None:
        """Compile the model's forward and ``loss(output, batch)`` as one region for training steps.

        Compiling the module alone left the loss eager: on GPT-2-small (vocabulary 50304) the 32 x 1024 x
        50304 logits went to memory in bf16, were read back, upcast and reduced by separate kernels, and
        the step ran 1.23x slower than a hand loop whose compiled forward ends in the cross-entropy
        (H100, 2026-11-26). One region lets inductor fuse the loss into the head's epilogue. Validation
        keeps calling the module alone (``forward``), its own graph: it never recompiles this one.
        """
        if self._recompile is not None and self._compiled is not None:
            self._with_loss = self._recompile(ModelAndLoss(self.model, loss))

    @property
    def fuses_loss(self) -> bool:
        """Whether training steps go through the fused forward-and-loss region (``fuse_loss``)."""
        return self._with_loss is not None

    def model_and_loss(self, args: tuple, kwargs: dict[str, Any], batch: Any, loss: Callable) -> torch.Tensor:
        """The training loss of ``batch`` through the fused region (``fuse_loss``), with the same fallback
        as ``forward``: a compile error warns once and the step runs eager from then on."""
        if self._with_loss is None or self._compiled is None:
            return loss(self(*args, **kwargs), batch)
        try:
            return self._with_loss(args, kwargs, batch)
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            self._warn_and_fall_back(exc)
        return loss(self.model(*args, **kwargs), batch)

    def _warn_and_fall_back(self, exc: BaseException) -> None:
        first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
        reason = f"torch.compile failed ({type(exc).__name__}: {first_line})"
        warnings.warn(f"{reason}; continuing without compilation", RuntimeWarning, stacklevel=3)
        self.fall_back(reason)

    @property
    def compiled(self):
        """The compiled callable, or None once fallen back."""
        return self._compiled

    def fall_back(self, reason: str) -> None:
        """Run eager from now on (the parameters are shared: nothing to move)."""
        self._compiled, self._with_loss, self.fell_back, self.reason = None, None, True, reason

    def forward(self, *args, **kwargs):
        if self._compiled is None:
            return self.model(*args, **kwargs)
        try:
            return self._compiled(*args, **kwargs)
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            self._warn_and_fall_back(exc)
        # Outside ``except``: the failed attempt's traceback (and the tensors its frames hold) is gone
        # before the eager run allocates its own.
        return self.model(*args, **kwargs)


def is_oom(exc: BaseException) -> bool:
    """A device (``torch.OutOfMemoryError``) or host ("out of memory" RuntimeError) allocation failure."""
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


def is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.compile failing to compile (not the compiled code failing to run).

    An out-of-memory error anywhere in the chain is not: a compiler wrapping an OOM it hit while
    autotuning reports memory pressure, which the OOM guard handles.
    """
    chain, seen = exc, set()
    while chain is not None and id(chain) not in seen:
        if is_oom(chain):
            return False
        seen.add(id(chain))
        chain = chain.__cause__ or chain.__context__
    return isinstance(exc, torch_private.compile_error_types())


def compile_model(
    model: nn.Module, mode: str | None = None, backend: str = "inductor", check: bool = False
) -> CompileFallback:
    """torch.compile ``model`` behind a ``CompileFallback``; ``check``: the run checks its first batch."""
    try:
        options = None
        if backend == "inductor":
            options = inductor_options(mode, on_cpu=_on_cpu(model), check=check)
        # torch.compile takes a mode or options, not both: the options already hold the mode's.
        recompile = functools.partial(
            torch.compile, mode=None if options else mode, backend=backend, options=options
        )
        compiled = recompile(model)
    except Exception as exc:  # an unknown backend or mode fails eagerly
        raise ConfigError(f"torch.compile(mode={mode!r}, backend={backend!r}) refused: {exc}") from None
    return CompileFallback(model, compiled, recompile)


def inductor_options(mode: str | None, on_cpu: bool, check: bool = False) -> dict | None:
    """Inductor's options for ``mode`` plus gpulab's; None when gpulab adds nothing (``mode`` alone).

    On the CPU, peak-memory reordering is off. Inductor's C++ backend loses a dependency on an in-place
    scatter (torch 2.13 at least): aligning the loops of a fused node
    (``SchedulerNode.recompute_size_and_body``) re-reads its inputs under their pre-mutation names, and
    ``reorder_for_peak_memory`` then moves the reader before the scatter. A conv feeding a MaxPool2d
    (whose backward is zeros + scatter_add) got all-zero gradients and trained silently worse. Without
    that reordering the scheduler's original order is correct; on the CPU it only costs a little host
    memory. benchmarks/inductor_maxpool_repro.py shows it; docs/RELIABILITY.md.

    ``check``: random numbers are drawn by eager's kernels (``fallback_random``), so that dropout masks
    match the eager step the first-batch check compares with.
    """
    extra = {}
    # a torch without the pass needs nothing
    if on_cpu and torch_private.inductor_has_option("reorder_for_peak_memory"):
        extra["reorder_for_peak_memory"] = False
    if check:
        extra["fallback_random"] = True
    return {**torch_private.inductor_mode_options(mode or "default"), **extra} if extra else None


def _on_cpu(model: nn.Module) -> bool:
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return first is None or accelerator(first.device).is_host


def apply_activation_checkpointing(model: nn.Module, class_names: list[str]) -> int:
    """Recompute the activations of every module whose class is named, instead of storing them.

    Trades one extra forward per module for the memory of its activations. The module's ``forward`` is
    wrapped on the instance, so parameter names and state_dict keys stay as they were.
    Returns how many modules were wrapped; a name that matches nothing is an error listing the names.
    """
    if not class_names:
        return 0
    wanted = set(class_names)
    present = {type(m).__name__ for m in model.modules()}
    if missing := wanted - present:
        raise ConfigError(
            f"activation_checkpointing: no module of class {sorted(missing)} in the model; "
            f"classes present: {choices(sorted(present))}"
        )
    count = 0
    for module in model.modules():
        if type(module).__name__ in wanted:
            module.forward = functools.partial(_checkpointed, module.forward)
            count += 1
    return count


def _checkpointed(forward, *args, **kwargs):
    # use_reentrant=False: the recommended implementation; works with kwargs and inputs without grad.
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
