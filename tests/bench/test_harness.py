"""The measuring harness: warm-up, synchronisation around every clock read, median and spread."""

from __future__ import annotations

import math
import time

import pytest
import torch

from gpulab.hardware.load import OtherCpuLoad
from gpulab.measure import harness
from gpulab.measure.harness import Timing, measure, peak_memory
from gpulab.measure.results import Figure


def test_spread_kind_follows_the_number_of_repeats():
    assert Figure.from_samples([1.0], "s").spread == "none"
    two = Figure.from_samples([1.0, 3.0], "s")
    assert (two.spread, two.low, two.value, two.high) == ("range", 1.0, 2.0, 3.0)
    iqr = Figure.from_samples([5.0, 1.0, 2.0, 3.0, 4.0, 100.0], "s")
    assert iqr.spread == "iqr"
    assert iqr.low <= iqr.value <= iqr.high < 100.0  # the outlier is outside the interquartile range
    assert iqr.repeats == 6


def test_ratio_takes_the_widest_interval():
    num = Figure(10.0, "x", 5, 9.0, 11.0, "iqr", "higher")
    den = Figure(2.0, "x", 4, 1.0, 4.0, "iqr", "higher")
    r = Figure.ratio(num, den)
    assert (r.value, r.low, r.high, r.repeats) == (5.0, 9.0 / 4.0, 11.0, 4)


def test_figure_json_round_trip_and_no_infinities_in_json():
    f = Figure(1.5, "ms", 3, 1.0, 2.0, "range", "lower")
    assert Figure.from_json(f.to_json()) == f
    broken = Figure.ratio(f, Figure(0.0, "ms", 1, 0.0, 0.0))
    assert broken.to_json()["value"] is None  # inf is not JSON


def test_measure_warms_up_then_times_each_repeat_between_synchronisations(monkeypatch):
    events = []
    monkeypatch.setattr(harness, "synchronize", lambda device: events.append("sync"))
    timing = measure(lambda: events.append("call"), device="cpu", warmup=2, repeats=3)
    assert events[:2] == ["call", "call"]  # warm-up, untimed
    assert events[2:] == ["sync", "call", "sync"] * 3
    assert timing.repeats == 3 and timing.inner == 1


def test_measure_batches_calls_too_short_for_the_clock():
    calls = []
    timing = measure(lambda: calls.append(1), device="cpu", warmup=0, repeats=2, min_sample_s=0.002)
    assert timing.inner > 1
    assert len(calls) == 1 + 2 * timing.inner  # one calibration call, then the samples


def test_timing_figures_carry_repeats_and_spread():
    t = Timing((0.010, 0.020, 0.030))
    ms = t.seconds("ms")
    assert (ms.value, ms.low, ms.high, ms.unit, ms.better) == (20.0, 10.0, 30.0, "ms", "lower")
    rate = t.rate(100, "samples/s")
    assert rate.better == "higher" and rate.repeats == 3
    assert math.isclose(rate.value, 5000.0) and rate.low < rate.value < rate.high


def test_measure_times_real_work():
    timing = measure(lambda: time.sleep(0.01), device="cpu", warmup=0, repeats=2)
    assert all(s >= 0.009 for s in timing.samples)


@pytest.mark.skipif(not harness.cpu_peak_supported(), reason="needs Linux /proc/self/clear_refs and glibc")
def test_cpu_peak_memory_sees_a_tensor_allocated_in_the_call():
    # 48 MiB: above glibc's largest mmap threshold (32 MiB), so every repeat maps and unmaps fresh pages.
    # A 16 MiB tensor could come from heap memory an earlier test freed, and move the RSS by nothing.
    def allocate():
        x = torch.ones(48 * 2**20 // 4)  # touched
        return float(x[-1])

    allocate()
    big = peak_memory(allocate, device="cpu", repeats=3).figure
    idle = peak_memory(lambda: None, device="cpu", repeats=2)
    assert big is not None and big.unit == "MiB" and big.repeats == 3
    assert 45 <= big.value <= 80, big  # every repeat, not only the first: RSS follows live tensors
    assert idle.figure is None and "resolves" in idle.kind  # noise below the resolution is no figure


def test_other_cpu_load_is_a_fraction():
    load = OtherCpuLoad()
    time.sleep(0.05)
    fraction = load.fraction()
    assert fraction is None or 0.0 <= fraction <= 1.0
