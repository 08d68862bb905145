"""docs/ARCHITECTURE.md's "add a device", followed: one class registered for a device type gpulab does not
ship (torch's ``meta``, where tensors exist without data), and every place that asked a table keyed by
``device.type`` -- the process-group backend, DDP's device ids and the rank's device, fused optimizer
kernels, ``precision: auto``, tune's compile modes, profile's timers -- takes its answers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.engines.torch import devices
from gpulab.engines.torch.devices import Accelerator, accelerator
from gpulab.engines.torch.distributed.process_group import backend_for, rank_device
from gpulab.engines.torch.measure.timers import EventPhaseTimer, phase_timer
from gpulab.engines.torch.runtime.fused_optimizer import use_fused_kernels
from gpulab.engines.torch.runtime.precision import resolve_precision
from gpulab.engines.torch.tune_space import compile_group
from gpulab.errors import DeviceError


class TickEvent:
    """A timing event at a fixed point of the device's clock (milliseconds)."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def elapsed_time(self, later: TickEvent) -> float:
        return later.ms - self.ms

    def synchronize(self) -> None:
        """Its time is known at once."""


class MetaAccelerator(Accelerator):
    """The new kind of device: its answers, each one the recipe names."""

    process_group_backend = "fakeccl"
    indexed_per_rank = True
    fused_optimizer = True
    compile_modes = (None, "max-autotune")
    timing_events = True

    def __init__(self, device: torch.device | str) -> None:
        super().__init__(device)
        self.clock_ms = 0.0

    def auto_precision(self) -> tuple[str, str]:
        return "bf16-mixed", f"{self.device}: its units compute in bf16"

    def timing_event(self) -> TickEvent:
        self.clock_ms += 2.0  # each mark 2 ms after the last
        return TickEvent(self.clock_ms)


@pytest.fixture
def meta_registered(monkeypatch):
    monkeypatch.setattr(devices, "_CLASSES", dict(devices._CLASSES))
    devices.register("meta", MetaAccelerator)
    yield
    devices._SEEN.clear()  # forget the meta seams asked for (the classes come back with monkeypatch)
    devices._for.cache_clear()


def test_an_unregistered_kind_answers_as_a_plain_device_and_cannot_join_a_process_group():
    assert type(accelerator("meta")) is Accelerator
    with pytest.raises(DeviceError, match="'meta' is not supported; valid device types: cpu\\|cuda\\|xpu$"):
        backend_for(torch.device("meta"))


def test_a_registered_device_answers_every_table(meta_registered):
    meta = torch.device("meta")
    assert isinstance(accelerator(meta), MetaAccelerator) and "meta" in devices.kinds()

    # process group: its backend, and each rank its own device, which DDP is given
    assert backend_for(meta) == "fakeccl"
    assert rank_device(meta, 3) == torch.device("meta", 3)
    assert accelerator(torch.device("meta", 3)).ddp_device_ids() == [3]

    # fused optimizer kernels, taken for parameters on it
    params = [nn.Parameter(torch.zeros(4, device=meta))]
    optimizer = torch.optim.AdamW(params)
    assert use_fused_kernels(optimizer).startswith("AdamW with fused kernels")
    assert optimizer.param_groups[0]["fused"] is True

    # precision: auto
    precision, why = resolve_precision("auto", meta)
    assert (precision.name, precision.device_type, why) == (
        "bf16-mixed",
        "meta",
        "meta: its units compute in bf16",
    )

    # gpulab tune's compile modes
    labels = [c.label for c in compile_group(meta).candidates]
    assert labels == ["compile=default", "compile=max-autotune"]

    # profile's phase timer, on its events
    timer = phase_timer(meta)
    assert isinstance(timer, EventPhaseTimer)
    timer.start_step()
    timer.mark("forward")
    timer.mark("backward")
    timer.finish()
    step = timer.steps[0]
    assert (step["forward"], step["backward"], step["step"]) == pytest.approx((0.002, 0.002, 0.006))
