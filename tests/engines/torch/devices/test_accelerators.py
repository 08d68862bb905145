"""The device seam: each kind of device's answers, the CPU's for real, CUDA's through a fake torch.cuda."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpulab.engines.torch.devices import (
    Accelerator,
    CpuAccelerator,
    CudaAccelerator,
    MpsAccelerator,
    accelerator,
)
from gpulab.engines.torch.runtime import memory as M
from gpulab.errors import DeviceError
from gpulab.measure import harness
from gpulab.measure.device_seam import HOST, DeviceSeam, seam_of


class FakeCuda:
    """The part of torch.cuda the CUDA seam calls, recording each call; two GPUs of 80 GB."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.peak = 0
        self.memory = SimpleNamespace(
            _record_memory_history=lambda **kw: self.calls.append(("history", kw)),
            _snapshot=lambda: {"segments": []},
        )

    def _call(self, name, *args):
        self.calls.append((name, *args))

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 1

    def synchronize(self, device):
        self._call("synchronize", device)

    def reset_peak_memory_stats(self, device):
        self._call("reset_peak", device)
        self.peak = 0

    def max_memory_allocated(self, device):
        return self.peak

    def memory_allocated(self, index):
        return 10

    def memory_reserved(self, index):
        return 30

    def get_device_properties(self, index):
        return SimpleNamespace(total_memory=80 * 10**9)

    def get_device_name(self, device):
        return "NVIDIA H100 80GB HBM3"

    def get_device_capability(self, device):
        return (9, 0)

    def mem_get_info(self, device):
        return (60 * 10**9, 80 * 10**9)

    def empty_cache(self):
        self._call("empty_cache")

    def set_per_process_memory_fraction(self, fraction, device):
        self._call("fraction", fraction, device)


def test_each_kind_of_device_gets_its_class_and_one_object_per_name():
    assert type(accelerator("cpu")) is CpuAccelerator
    assert type(accelerator(torch.device("cuda", 0))) is CudaAccelerator
    assert type(accelerator("mps")) is MpsAccelerator
    assert type(accelerator("meta")) is Accelerator  # no facilities of its own
    assert accelerator("cpu") is accelerator(torch.device("cpu"))
    given = accelerator("cpu")
    assert accelerator(given) is given


def test_the_cpu_answers_as_the_host():
    cpu = accelerator("cpu")
    assert cpu.is_host and not cpu.non_blocking  # a device->host copy must have landed when it returns
    facilities = (cpu.allocator_peaks, cpu.streams, cpu.pin_memory, cpu.cuda_graphs, cpu.memory_snapshot)
    assert not any(facilities)
    assert not (cpu.channels_last_fast or cpu.tf32_units or cpu.data_parallel or cpu.datasheet)
    assert cpu.profiler_activity is None and cpu.kernel_timer.startswith("perf_counter")
    assert cpu.autocast_device_type == "cpu" and cpu.canonical() == torch.device("cpu")
    assert cpu.rng_devices() == [] and cpu.compute_capability() is None
    cpu.synchronize()  # nothing queued: returns at once
    assert cpu.free_bytes() > 0 and cpu.capacity_bytes() >= cpu.free_bytes()
    stats = cpu.memory_stats(limit_bytes=123)
    assert (
        stats.kind == "process RSS" and stats.limit_bytes == 123 and stats.peak_bytes >= stats.current_bytes
    )
    with pytest.raises(DeviceError, match="CUDA caching allocator"):
        cpu.start_memory_history(10)


def test_a_device_without_facilities_answers_like_the_cpu_but_is_not_the_host():
    mps = accelerator("mps")
    assert not mps.is_host and mps.non_blocking and not mps.allocator_peaks and not mps.streams
    assert mps.free_bytes() is None  # unknown: the fast path keeps the data resident, as before
    assert mps.memory_stats(None).kind == "process RSS"


def test_cuda_answers_from_its_allocator_through_torch_cuda():
    fake = FakeCuda()
    gpu = CudaAccelerator(torch.device("cuda"), cuda=fake)
    assert gpu.allocator_peaks and gpu.streams and gpu.pin_memory and gpu.cuda_graphs and gpu.non_blocking
    assert gpu.channels_last_fast and gpu.tf32_units and gpu.data_parallel and gpu.datasheet
    assert gpu.profiler_activity == "CUDA" and gpu.kernel_timer == "cuda events"
    assert gpu.canonical() == torch.device("cuda", 1)  # a bare "cuda" is the current device
    assert gpu.key() == "cuda:1" and gpu.rng_devices() == [1]
    assert gpu.name() == "NVIDIA H100 80GB HBM3" and gpu.compute_capability() == (9, 0)
    gpu.synchronize()
    gpu.reset_peak_memory()
    fake.peak = 4096
    assert gpu.peak_memory_bytes() == 4096
    stats = gpu.memory_stats(limit_bytes=40 * 10**9)
    assert (stats.device, stats.kind, stats.current_bytes, stats.reserved_bytes) == (
        "cuda:1",
        "allocator",
        10,
        30,
    )
    assert stats.total_bytes == 80 * 10**9 and stats.peak_fraction == 4096 / (40 * 10**9)
    assert gpu.free_bytes() == 60 * 10**9 and gpu.capacity_bytes() == 80 * 10**9
    gpu.release_cached_memory()
    gpu.set_memory_fraction(0.5)
    gpu.start_memory_history(7)
    assert gpu.memory_history() == {"segments": []}
    gpu.stop_memory_history()
    names = [c[0] for c in fake.calls]
    assert names == ["synchronize", "reset_peak", "empty_cache", "fraction", "history", "history"]
    assert fake.calls[3] == ("fraction", 0.5, torch.device("cuda"))
    assert fake.calls[4][1] == {"max_entries": 7} and fake.calls[5][1] == {"enabled": None}


def test_cuda_with_an_index_keeps_it():
    gpu = CudaAccelerator("cuda:0", cuda=FakeCuda())
    assert gpu.canonical() == torch.device("cuda", 0) and gpu.rng_devices() == [0]
    assert gpu.memory_stats(None).device == "cuda:0"


def test_the_memory_functions_ask_the_seam(monkeypatch):
    fake = FakeCuda()
    gpu = CudaAccelerator("cuda:0", cuda=fake)
    monkeypatch.setattr("gpulab.engines.torch.runtime.memory.accelerator", lambda device: gpu)
    M.set_memory_limit("cuda:0", 0.25)
    try:
        assert M.memory_limit_bytes("cuda:0") == 20 * 10**9  # a quarter of the fake's 80 GB
        assert ("fraction", 0.25, torch.device("cuda", 0)) in fake.calls
        M.reset_peak_memory("cuda:0")
        fake.peak = 99
        assert M.peak_memory_bytes("cuda:0") == 99 and M.memory_stats("cuda:0").limit_bytes == 20 * 10**9
    finally:
        M.set_memory_limit("cuda:0", None)
    assert ("fraction", 1.0, torch.device("cuda", 0)) in fake.calls and M.memory_limit_bytes("cuda:0") is None


def test_the_harness_takes_a_torch_seam_and_refuses_a_gpu_without_one():
    assert seam_of("cpu") is HOST and seam_of(torch.device("cpu")) is HOST
    assert isinstance(accelerator("cpu"), DeviceSeam) and seam_of(accelerator("cpu")) is accelerator("cpu")
    with pytest.raises(TypeError, match="device seam"):
        seam_of(torch.device("cuda", 0))  # timing a GPU without waiting for it would be wrong


def test_the_harness_reads_an_allocator_peak_between_synchronisations():
    fake = FakeCuda()
    gpu = CudaAccelerator("cuda:0", cuda=fake)

    def step():
        fake.calls.append(("step",))
        fake.peak = 3 * harness.MIB

    reading = harness.peak_memory(step, device=gpu, repeats=2)
    assert reading.figure.value == 3.0 and reading.kind == gpu.peak_description
    one = ["synchronize", "reset_peak", "step", "synchronize"]
    assert [c[0] for c in fake.calls] == one * 2
    timing = harness.measure(step, device=gpu, warmup=0, repeats=1)
    assert timing.repeats == 1 and [c[0] for c in fake.calls[-3:]] == ["synchronize", "step", "synchronize"]


def test_a_bench_context_hands_the_harness_its_engines_seam():
    ctx = harness.BenchContext(torch.device("cpu"), "smoke")
    assert ctx.seam is HOST
    ctx.accelerator = accelerator("cpu")
    assert ctx.seam is accelerator("cpu")
