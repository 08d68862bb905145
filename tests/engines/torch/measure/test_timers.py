"""Phase timers add up to the step; outliers are whole steps; data wait in the loop."""

from __future__ import annotations

import time

import pytest

from gpulab.engines.torch.measure.timers import DataWaitMeter, PhaseTimer, phase_timer


def _sleep_step(timer: PhaseTimer, slow: float = 1.0, sleep=time.sleep) -> None:
    timer.start_step()
    timer.mark("data")
    sleep(0.004 * slow)
    timer.mark("forward")
    sleep(0.002)
    timer.mark("backward")
    sleep(0.003)
    timer.mark("optimizer")
    sleep(0.001)
    timer.end_phase()
    sleep(0.001)  # idle: outside every phase


def test_phases_add_up_to_the_step():
    timer = phase_timer("cpu")
    for _ in range(3):
        _sleep_step(timer)
    timer.finish()
    s = timer.summary()
    parts = sum(s[k] for k in ("data", "forward", "backward", "communication", "optimizer", "idle"))
    assert parts == pytest.approx(s["step"], rel=1e-6)
    assert s["data"] >= 0.004 and s["idle"] >= 0.001 and s["communication"] == 0.0
    assert len(timer.steps) == 3


class ScriptedTimer(PhaseTimer):
    """A PhaseTimer on a clock the test moves: a real sleep on a loaded machine can itself be descheduled,
    making a second 'outlier' (or none) where the rule under test needs exactly one."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.clock = 0.0

    def _now(self) -> float:
        return self.clock

    def sleep(self, seconds: float) -> None:
        self.clock += seconds


def test_a_descheduled_step_is_left_out_whole():
    timer = ScriptedTimer()
    for slow in (1, 1, 1, 1, 40):
        _sleep_step(timer, slow, sleep=timer.sleep)
    timer.finish()
    assert len(timer.outliers()) == 1 and len(timer.kept_steps()) == 4
    assert timer.summary()["data"] == pytest.approx(0.004)
    assert timer.summary(outlier_factor=None)["data"] == pytest.approx((4 * 0.004 + 0.16) / 5)


def test_data_wait_meter_counts_time_in_next():
    def slow():
        for i in range(3):
            time.sleep(0.01)
            yield i

    meter = DataWaitMeter()
    assert list(meter.wrap(slow())) == [0, 1, 2]
    assert meter.batches == 3 and meter.seconds >= 0.03


class FakeStream:
    def __init__(self, device):
        self.device = device


class FakeEvent:
    """torch.cuda.Event's shape: remembers the stream it was recorded on (None: the current device's)."""

    clock = 0.0

    def __init__(self, enable_timing=False):
        self.stream, self.ms = None, None

    def record(self, stream=None):
        FakeEvent.clock += 2.0
        self.stream, self.ms = stream, FakeEvent.clock

    def elapsed_time(self, end):
        return end.ms - self.ms

    def synchronize(self):
        pass


def test_cuda_phase_events_are_recorded_on_the_runs_device_not_the_current_one(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream(device))
    timer = phase_timer("cuda:1")
    recorded = []
    real_now = timer._now
    monkeypatch.setattr(timer, "_now", lambda: recorded.append(real_now()) or recorded[-1])
    timer.start_step()
    timer.mark("forward")
    timer.finish()
    assert len(recorded) == 3 and timer.steps[0]["forward"] == pytest.approx(0.002)
    assert all(e.stream is not None and e.stream.device == torch.device("cuda", 1) for e in recorded)
