"""``compile_check``: the compiled model's first batch against eager's, before the first optimizer step.

A compiler that computes wrong gradients raises nothing; the run just trains worse (torch 2.13's inductor
zeroed a conv's gradients before a MaxPool2d on the CPU: docs/RELIABILITY.md). The check runs the first
micro-batch's forward and backward compiled (the real step), keeps its gradients in a side buffer, then
runs the same micro-batch eagerly from the same RNG state and module buffers and compares the losses and
every parameter's gradient.

- They agree: the compiled gradients, buffers and RNG state are put back, so the run is exactly the one
  without the check (the check costs one eager forward and backward, and a copy of the gradients kept in
  host memory, not on the device).
- They differ: the eager step stands (its gradients, its BatchNorm statistics, its draws), so the run
  continues as an eager run would from the start, without compilation, with a GpulabWarning naming the
  parameter that differs most and its layer.

The tolerance is loose (``TOLERANCE`` of the layer's gradient scale): it catches wrong code, whose errors
are as large as the gradients themselves, not rounding or fused reductions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

TOLERANCE = 0.1
# A layer whose gradients are tiny next to the model's largest (a conv bias before a BatchNorm: zero up to
# rounding) is compared on this share of the largest gradient instead: its rounding is not an error.
FLOOR = 0.01


@dataclass(frozen=True)
class CheckResult:
    loss: torch.Tensor  # the loss the step reports: the compiled one, or the eager one after a fall-back
    problem: str | None  # None: they agree
    worst: float  # the largest difference found, as a share of its scale

    def to_json(self) -> dict:
        return {"agrees": self.problem is None, "largest_difference": round(self.worst, 6)}


def check_first_step(
    model: nn.Module, step: Callable[[Callable], torch.Tensor], compiled: Callable, eager: Callable
) -> CheckResult:
    """Run ``step(compiled)`` (the real step), then ``step(eager)`` from the same state, and compare.

    ``step(forward)`` runs one micro-batch's forward (through ``forward``) and backward, and returns the
    loss. The gradients must be empty (None or zero) before the call, as at the first step of a fit.
    """
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    rng, buffers = _rng_state(), _copy_buffers(model)
    loss_c = step(compiled)
    side = [None if p.grad is None else p.grad.detach().to("cpu", copy=True) for _, p in params]
    after_rng, after_buffers = _rng_state(), _copy_buffers(model)

    for _, p in params:
        p.grad = None
    _set_rng_state(rng)
    _load_buffers(model, buffers)
    loss_e = step(eager)

    problem, worst = _compare(model, params, side, loss_c, loss_e)
    if problem is not None:
        return CheckResult(loss_e, problem, worst)
    for (_, p), g in zip(params, side, strict=True):
        p.grad = None if g is None else g.to(p.device)
    _set_rng_state(after_rng)
    _load_buffers(model, after_buffers)
    return CheckResult(loss_c, None, worst)


def _compare(model, params, side, loss_c, loss_e) -> tuple[str | None, float]:
    lc, le = float(loss_c.detach().float()), float(loss_e.detach().float())
    if math.isfinite(lc) != math.isfinite(le):
        return f"the loss ({lc:.6g} compiled, {le:.6g} eager)", math.inf
    loss_diff = abs(lc - le) / max(abs(le), 1e-12) if math.isfinite(le) else 0.0
    eager = [None if p.grad is None else p.grad.detach() for _, p in params]
    largest = max((_finite_max(g) for g in eager if g is not None), default=0.0)
    worst, where = 0.0, None
    for (name, _), g_c, g_e in zip(params, side, eager, strict=True):
        if (g_c is None) != (g_e is None):
            return f"{_layer(model, name)}: a gradient only {'eagerly' if g_c is None else 'compiled'}", 1.0
        if g_e is None or not g_e.numel():
            continue
        g_c, g_e = g_c.float(), g_e.to("cpu", torch.float32)  # one parameter at a time: bounded memory
        finite = torch.isfinite(g_e)
        if not torch.equal(finite, torch.isfinite(g_c)):  # an overflow on one side only
            share = math.inf
        else:  # (an fp16 overflow on both sides is the loss scaler's business)
            scale = max(_finite_max(g_e), FLOOR * largest, 1e-30)
            share = _finite_max((g_c - g_e)[finite]) / scale
        if share > worst:
            worst, where = share, name
    if loss_diff > TOLERANCE:
        return f"the loss ({lc:.6g} compiled, {le:.6g} eager)", max(worst, loss_diff)
    if worst > TOLERANCE:
        return f"the gradient of {_layer(model, where)} ({_share(worst)})", worst
    return None, max(worst, loss_diff)


def _finite_max(g: torch.Tensor) -> float:
    finite = g[torch.isfinite(g)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def _share(x: float) -> str:
    return "non-finite on one side only" if math.isinf(x) else f"off by {x:.0%} of its largest value"


def _layer(model: nn.Module, param_name: str) -> str:
    owner, _, _ = param_name.rpartition(".")
    try:
        kind = type(model.get_submodule(owner)).__name__
    except AttributeError:
        return param_name
    return f"{param_name} ({kind})"


def _copy_buffers(model: nn.Module) -> list[torch.Tensor]:
    return [b.detach().clone() for b in model.buffers()]


def _load_buffers(model: nn.Module, saved: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for b, s in zip(model.buffers(), saved, strict=True):
            b.copy_(s)


def _rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class FirstStepCheck:
    """The trainer's side of ``compile_check``: pending until the fit's first micro-batch, then a report.

    It runs where the check can restore everything it touched: one process (the ranks' gradient buckets
    and shards are not copied around), and a plain step (``micro_batch: auto`` splits and retries it).
    """

    def __init__(self, enabled: bool, forward, world_size: int, guarded: bool) -> None:
        from gpulab.engines.torch.runtime.compile import CompileFallback

        self.pending, self.report = False, {}
        if not enabled or not isinstance(forward, CompileFallback):
            return  # compile off: nothing to check, and nothing to say
        if world_size > 1:
            self.report = {"skipped": f"runs on one process only ({world_size} ranks here)"}
        elif guarded:
            self.report = {"skipped": "not with micro_batch: auto (its step is split and retried)"}
        else:
            self.pending = True

    def run(self, model: nn.Module, wrapper, step: Callable[[Callable], torch.Tensor]) -> torch.Tensor:
        """The first micro-batch's step, checked; returns its loss."""
        import warnings

        from gpulab.errors import GpulabWarning

        self.pending = False
        result = check_first_step(model, step, wrapper, wrapper.model)
        if wrapper.fell_back and result.problem is None:  # compilation itself failed: nothing compiled ran
            self.report = {"skipped": "compilation failed"}
            return result.loss
        self.report = result.to_json()
        if result.problem is not None:
            why = f"compile_check: the compiled model's first batch differs from eager in {result.problem}"
            self.report["differs_in"] = result.problem
            wrapper.fall_back(why)
            warnings.warn(f"{why}; training continues without compilation", GpulabWarning, stacklevel=2)
        return result.loss
