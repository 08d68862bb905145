"""Memory statistics, limits, the step estimate and the batch-size search (CPU; GPU parts marked)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime import memory as M
from gpulab.engines.torch.runtime.batch_search import (
    BatchSizeError,
    TrialStep,
    find_batch_size,
    search_batch_size,
)
from gpulab.engines.torch.runtime.memory_estimate import LiveBytes, estimate_memory, optimizer_memory
from gpulab.errors import ConfigError, DeviceError
from gpulab.hardware.host_memory import reset_peak_rss

CPU = torch.device("cpu")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _no_limits():
    M._LIMITS.clear()
    yield
    M._LIMITS.clear()


# --- statistics ---------------------------------------------------------------------------------------


def test_cpu_stats_are_the_process_resident_set():
    stats = M.memory_stats("cpu")
    assert stats.kind == "process RSS" and stats.device == "cpu"
    assert 0 < stats.current_bytes <= stats.peak_bytes
    assert stats.reserved_bytes == stats.current_bytes
    assert stats.total_bytes > stats.current_bytes and stats.limit_bytes is None
    assert set(stats.to_json()) >= {"current_bytes", "peak_bytes", "reserved_bytes", "peak_fraction"}


def test_a_cpu_limit_is_not_held_against_the_resident_set():
    # 1 MiB is far below what the interpreter alone holds: the recorded budget must not read as "full".
    M.set_memory_limit(CPU, 2**20)
    stats = M.memory_stats(CPU)
    assert stats.limit_bytes == 2**20 and stats.peak_bytes > 2**20
    assert stats.peak_fraction == stats.peak_bytes / stats.total_bytes < 0.9


def test_an_enforced_limit_is_the_denominator():
    stats = M.MemoryStats("cuda:0", "allocator", 10, 80, 90, total_bytes=1000, limit_bytes=100)
    assert stats.peak_fraction == 0.8
    assert M.MemoryStats("cuda:0", "allocator", 10, 80, 90, 1000, None).peak_fraction == 0.08


def test_cpu_peak_sees_an_allocation_and_resets():
    M.reset_peak_memory(CPU)
    before = M.peak_memory_bytes(CPU)
    big = torch.ones(48 * 2**20 // 4)  # 48 MiB, every page touched
    during = M.peak_memory_bytes(CPU)
    del big
    M.release_cached_memory(CPU)
    assert during - before > 40 * 2**20
    if reset_peak_rss():  # Linux lets a process reset its high-water mark
        assert M.peak_memory_bytes(CPU) < during - 40 * 2**20


def test_memory_limit_in_bytes_or_as_a_fraction_is_recorded_on_cpu():
    total = M.memory_stats(CPU).total_bytes
    assert M.set_memory_limit("cpu", 2**30) == 2**30
    assert M.memory_limit_bytes(CPU) == 2**30 and M.memory_stats(CPU).limit_bytes == 2**30
    assert M.set_memory_limit(CPU, 0.25) == int(0.25 * total)
    assert M.set_memory_limit(CPU, None) is None and M.memory_limit_bytes(CPU) is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, 0.0, "1GB", True])
def test_bad_memory_limits_are_one_line_config_errors(bad):
    with pytest.raises(ConfigError):
        M.set_memory_limit(CPU, bad)


def test_snapshot_needs_cuda():
    with pytest.raises(DeviceError, match="CUDA"), M.memory_snapshot(CPU, "x.pickle"):
        pass


@cuda
@pytest.mark.gpu
def test_cuda_stats_limit_and_snapshot(tmp_path):
    dev = torch.device("cuda")
    M.reset_peak_memory(dev)
    with M.memory_snapshot(dev, tmp_path / "snap.pickle") as path:
        x = torch.empty(64 * 2**20, device=dev, dtype=torch.uint8)
    stats = M.memory_stats(dev)
    assert (
        stats.kind == "allocator"
        and stats.peak_bytes >= 64 * 2**20
        and stats.reserved_bytes >= stats.current_bytes
    )
    assert path.stat().st_size > 0
    del x
    M.release_cached_memory(dev)
    try:
        M.set_memory_limit(dev, 0.5)
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(0.6 * stats.total_bytes), device=dev, dtype=torch.uint8)
    finally:
        M.set_memory_limit(dev, None)


# --- the estimate -------------------------------------------------------------------------------------


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))


def _data(n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_estimate_counts_parameters_gradients_and_adam_state_exactly():
    model = _mlp()
    n_bytes = sum(p.numel() * 4 for p in model.parameters())
    est = estimate_memory(
        model,
        torch.optim.AdamW(model.parameters()),
        "fp32",
        _data(4),
        loss_fn=nn.functional.cross_entropy,
        batch_size=32,
    )
    assert est.method == "fake tensors" and est.batch_size == 32
    assert est.parameters_bytes == n_bytes == est.gradients_bytes
    assert est.optimizer_state_bytes == 2 * n_bytes + 4 * 4  # exp_avg, exp_avg_sq and a float step per tensor
    assert est.activations_bytes > 0 and est.predicted_peak_bytes > 3 * n_bytes
    sgd = optimizer_memory(torch.optim.SGD(model.parameters(), lr=0.1), list(model.parameters()))
    momentum = optimizer_memory(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), list(model.parameters())
    )
    assert sgd[0] == 0 and momentum[0] == n_bytes


def test_estimate_predicts_the_measured_step_and_scales_with_the_batch():
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters())
    step = TrialStep(model, opt, nn.functional.cross_entropy, _data(), device=CPU)
    estimates = {}
    for b in (16, 128):
        est = estimate_memory(model, opt, None, _data(2), loss_fn=nn.functional.cross_entropy, batch_size=b)
        assert step(b) == pytest.approx(est.predicted_peak_bytes, rel=0.02)
        estimates[b] = est
    # What forward leaves for backward grows in proportion to the batch; a re-evaluation agrees.
    assert estimates[128].activations_bytes == pytest.approx(8 * estimates[16].activations_bytes, rel=0.01)
    assert estimates[16].at(128).activations_bytes == pytest.approx(
        estimates[128].activations_bytes, rel=0.01
    )


def test_a_fake_trace_at_a_huge_batch_builds_no_real_batch_of_that_size(monkeypatch):
    # The batch search asks for estimates at millions of rows: building those rows for real cost the
    # CPU's `batch_size: auto` 10 s of its 14 s (mlp) before the trace made them fake anyway.
    import gpulab.engines.torch.runtime.memory_estimate as E

    real_resize = E._resize

    def small_only(batch, b):
        assert b <= 2, f"a real batch of {b} rows was built"
        return real_resize(batch, b)

    monkeypatch.setattr(E, "_resize", small_only)
    model = _mlp()
    est = estimate_memory(
        model, None, None, _data(2), loss_fn=nn.functional.cross_entropy, batch_size=1 << 22
    )
    small = estimate_memory(model, None, None, _data(2), loss_fn=nn.functional.cross_entropy, batch_size=1024)
    assert est.method == "fake tensors"
    assert est.activations_bytes == pytest.approx((1 << 12) * small.activations_bytes, rel=0.01)


def test_estimate_leaves_the_model_untouched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = (torch.randn(4, 8), torch.randint(0, 2, (4,)))
    rng = torch.get_rng_state()
    estimate_memory(
        model, torch.optim.Adam(model.parameters()), "bf16-mixed", batch, loss_fn=nn.functional.cross_entropy
    )
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


class _DataDependent(nn.Module):
    """``.item()`` in forward: fake tensors cannot run it, so the estimate traces for real."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        scale = float(x.abs().max().item())
        return self.lin(x) / max(scale, 1.0)


def test_estimate_falls_back_to_a_real_trace():
    model = _DataDependent()
    est = estimate_memory(
        model, None, None, (torch.randn(4, 8), torch.randn(4, 8)), loss_fn=nn.functional.mse_loss
    )
    assert est.method == "real step" and est.notes and est.optimizer_state_bytes == 0
    assert est.activations_bytes > 0 and all(p.grad is None for p in model.parameters())


def test_live_bytes_counts_new_storages_until_freed():
    with LiveBytes() as tracker:
        a = torch.empty(1000)
        b = a.view(10, 100)  # a view: no new storage
        peak_with_a = tracker.live
        del a, b
        c = torch.empty(10)
    assert peak_with_a == 4000 and tracker.peak == 4000 and tracker.live == 40
    del c


# --- the batch-size search ----------------------------------------------------------------------------


def test_find_batch_size_against_a_cpu_limit_with_real_steps():
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters())
    step = TrialStep(model, opt, nn.functional.cross_entropy, _data(), device=CPU)
    peaks = {b: step(b) for b in (150, 151)}  # large enough that activations set the peak
    assert peaks[150] < peaks[151]
    M.set_memory_limit(CPU, (peaks[150] + peaks[151]) // 2)  # the configured limit is what the search honours
    before = [p.clone() for p in model.parameters()]
    search = find_batch_size(step, device=CPU, start=8, high=512)
    assert search.batch_size == 150 and search.limit_bytes == M.memory_limit_bytes(CPU)
    assert [t.batch_size for t in search.trials][:6] == [8, 16, 32, 64, 128, 256]
    assert all(t.fits == (t.batch_size <= 150) for t in search.trials)
    assert all(
        torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
    )  # trials leave no trace
    assert not opt.state


def test_find_batch_size_starting_too_high_comes_down():
    search = find_batch_size(lambda b: b * 100, device=CPU, limit_bytes=1234, start=64, high=1000)
    assert search.batch_size == 12 and search.trials[0].batch_size == 64


def test_find_batch_size_treats_out_of_memory_as_not_fitting():
    def step(b):
        if b > 100:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return None

    search = find_batch_size(step, device=CPU, start=1, high=10_000)
    assert search.batch_size == 100
    assert any(t.why == "out of memory" for t in search.trials)


def test_the_failed_steps_tensors_are_freed_before_the_cache_is_released(monkeypatch):
    import weakref

    import gpulab.engines.torch.runtime.batch_search as batch_search

    held = []  # a weak reference to the activation each failing step held when it ran out

    def step(b):
        activation = torch.empty(b, 1024)  # what the failed step's frame still holds
        held.append(weakref.ref(activation))
        if b > 4:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return None

    alive_at_release = []
    monkeypatch.setattr(
        batch_search, "release_cached_memory", lambda device: alive_at_release.append(held[-1]() is not None)
    )
    assert find_batch_size(step, device=CPU, start=8, high=8).batch_size == 4
    assert alive_at_release and not any(alive_at_release)  # nothing of the failed step left to hold


def test_find_batch_size_agrees_across_ranks_with_min():
    current = {}

    def step(b):
        current["b"] = b
        return b

    def all_reduce(flag, op):  # the other rank fits only up to 20
        assert op == "min"
        return torch.minimum(flag, torch.tensor([1.0 if current["b"] <= 20 else 0.0]))

    search = find_batch_size(step, device=CPU, limit_bytes=1000, start=4, high=1000, all_reduce=all_reduce)
    assert search.batch_size == 20
    assert any(t.why == "does not fit on another rank" for t in search.trials)


def test_nothing_fits_is_a_clear_error():
    with pytest.raises(BatchSizeError, match="not even a batch of 1"):
        find_batch_size(lambda b: 10**9, device=CPU, limit_bytes=10, start=4, high=64)


def test_search_batch_size_with_a_runtime_under_a_limit():
    from gpulab.engines.torch.runtime import Runtime

    model = _mlp()
    with Runtime("cpu", "fp32") as rt:
        model, opt = rt.setup(model, lambda p: torch.optim.AdamW(p))
        step = TrialStep(model, opt, nn.functional.cross_entropy, _data(), device=CPU)
        limit = (step(300) + step(301)) // 2
        search = search_batch_size(rt, model, opt, nn.functional.cross_entropy, _data(), limit_bytes=limit)
    assert search.batch_size == 300
    assert abs(search.start - 300) <= 10  # the estimate put the start next to the answer
    assert len(search.trials) <= 7
