"""FLOPs of one training step, counted by ``torch.utils.flop_counter.FlopCounterMode``, and MFU.

The counter sees every operator of the forward and backward passes and counts the matrix products,
convolutions and attention kernels (2 FLOPs per multiply-add); element-wise operations, norms and the
optimizer step are not counted, as in the usual MFU definition (PaLM's appendix B). A ``Linear`` of
``in -> out`` over ``B`` rows costs ``2*B*in*out`` forward and twice that backward (the gradient of the
weight, and of the input when the input needs one).

The step is traced with fake tensors (shapes and dtypes only: no memory, no compute, no random numbers
drawn, no batch-norm statistics changed), so counting leaves the run exactly as it was. A model fake
tensors cannot run is counted on a real step over a copy, with the RNG state restored.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpulab import precisions
from gpulab.engines.torch.data.transfer import iter_tensors
from gpulab.engines.torch.runtime.memory_estimate import fake_step_inputs, holds_shards, unwrap_module
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import LossCall, step_loss
from gpulab.engines.torch.torch_private import tree_flatten


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward + backward over ``batch_size`` samples, in total and by operator."""

    total: int
    batch_size: int
    by_operator: dict[str, int] = field(default_factory=dict)
    method: str = "fake tensors"

    @property
    def per_sample(self) -> float:
        return self.total / self.batch_size if self.batch_size else 0.0


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """FLOPs of whatever ``fn`` runs (forward, backward, anything), counted as it runs."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return FlopCount(counter.get_total_flops(), 0, _by_operator(counter))


def training_step_flops(
    model: nn.Module,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None,
    batch: Any,
    *,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> FlopCount:
    """FLOPs of one forward + backward of ``model`` on ``batch`` (``(inputs..., target)``, a dict, ...:
    called as the Trainer calls it, ``gpulab.engines.torch.runtime.step_call``).

    Only shapes matter: the count for a batch of B samples is B times the count for one for the usual
    models, and ``FlopCount.per_sample`` gives it. ``model`` may be wrapped (DDP, ``torch.compile``):
    the user's module inside is traced.
    """
    plain = unwrap_module(model)
    if holds_shards(plain):
        # functional_call would swap FSDP2's DTensor parameters under its hooks (and corrupt tied ones
        # for the real steps that follow); count a real step instead (MfuCallback does).
        raise ValueError("the model's parameters are sharded (FSDP2): count FLOPs on a real step")
    first = next(iter_tensors(batch), None)
    rows = int(first.shape[0]) if first is not None and first.dim() else 0
    loss = LossCall(loss_fn, Signature(plain))  # forward's own signature, not the tracing wrapper's
    try:
        total, ops = _count_fake(plain, loss, batch, autocast)
        method = "fake tensors"
    except Exception:  # no fake implementation for some op: count a real step on a copy
        total, ops = _count_real(plain, loss, batch, autocast)
        method = "real step"
    return FlopCount(total, rows, ops, method)


def _count_fake(model, loss_fn, batch, autocast) -> tuple[int, dict[str, int]]:
    mode, tensors, trainable, fake_batch = fake_step_inputs(model, batch)

    def forward(*args, **kwargs):
        return torch.func.functional_call(model, tensors, args, kwargs)

    was_training = model.training
    model.train()
    try:
        with mode, FlopCounterMode(display=False) as counter:
            with autocast():
                loss = step_loss(forward, loss_fn, fake_batch)
            if trainable:
                torch.autograd.grad(loss, trainable, allow_unused=True)
    finally:
        model.train(was_training)
    return counter.get_total_flops(), _by_operator(counter)


def _count_real(model, loss_fn, batch, autocast) -> tuple[int, dict[str, int]]:
    twin = copy.deepcopy(model).train()
    cuda = [t.device for t in tree_flatten(batch)[0] if isinstance(t, torch.Tensor) and t.is_cuda][:1]
    with torch.random.fork_rng(devices=cuda), FlopCounterMode(display=False) as counter:
        with autocast():
            loss = step_loss(twin, loss_fn, batch)
        loss.backward()
    return counter.get_total_flops(), _by_operator(counter)


def _by_operator(counter: FlopCounterMode) -> dict[str, int]:
    counts = counter.get_flop_counts().get("Global", {})
    return {str(op): int(n) for op, n in counts.items()}


def achieved_flops_per_s(flops_per_step: float, step_seconds: float) -> float | None:
    return flops_per_step / step_seconds if step_seconds > 0 else None


@dataclass(frozen=True)
class Peaks:
    """Peak FLOP/s of this device for a precision: datasheet (None for an unknown part) and measured."""

    dtype: str
    device_name: str
    datasheet: float | None
    measured: float | None
    measurement: Any = field(default=None, compare=False)  # hardware.peaks.PeakMeasurement behind it

    def within_peak(self, achieved: float | None) -> tuple[Peaks, str | None]:
        """These peaks, or, when ``achieved`` beats the measured one, peaks re-measured (and raised to the
        run's figure if it still beats them), with a note saying so: MFU never exceeds 100 % of its divisor.
        """
        if achieved is None or not self.measured or achieved <= self.measured or self.measurement is None:
            return self, None
        from gpulab.hardware.peaks import raise_beaten_peak

        try:
            fresh, note = raise_beaten_peak(self.measurement, achieved)
        except Exception as exc:  # a peak that cannot be re-measured: drop it rather than print > 100 %
            return replace(self, measured=None, measurement=None), f"measured peak dropped: {exc}"
        return replace(self, measured=fresh.flops_per_s, measurement=fresh), note

    def mfu(self, achieved: float | None) -> dict[str, float | None]:
        """MFU against each peak (None where a peak or the achieved rate is unknown)."""

        def ratio(peak: float | None) -> float | None:
            return None if achieved is None or not peak else achieved / peak

        return {"mfu": ratio(self.datasheet), "mfu_measured": ratio(self.measured)}

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "device_name": self.device_name,
            "datasheet_flops_per_s": self.datasheet,
            "measured_flops_per_s": self.measured,
        }


def device_peaks(device: torch.device | str, precision: str, *, measure: bool = True) -> Peaks:
    """The datasheet and measured peaks of ``device`` for ``precision`` (a policy name).

    The measured one comes from ``hardware.peaks.measure_peak`` with its defaults and its cache, the very
    figure ``gpulab doctor --peak`` shows: one peak per device, dtype, thread count and torch version.
    """
    from gpulab.engines.torch.devices import accelerator
    from gpulab.hardware.peaks import cpu_name, datasheet_peak, measure_peak

    device = torch.device(device)
    acc = accelerator(device)
    dtype = precisions.get(precision).peak_dtype  # an unknown precision is an error: no fp32 guess
    if acc.datasheet:
        name = acc.name()
        sheet = datasheet_peak(name, dtype)
    else:
        name, sheet = cpu_name(), None
        dtype = "fp32" if dtype == "tf32" else dtype  # no TF32 units on a CPU
    measurement = None
    if measure and (acc.is_host or acc.datasheet):  # the devices measure_peak has a timer for
        try:
            measurement = measure_peak(str(device), dtype)
        except Exception:  # a peak that cannot be measured here only leaves that MFU blank
            measurement = None
    measured = measurement.flops_per_s if measurement is not None else None
    return Peaks(dtype, name, sheet, measured, measurement)
