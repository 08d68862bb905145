"""NVML sampling (silent without a GPU) and the MFU / NVML callbacks on a real Trainer fit."""

from __future__ import annotations

import torch
from torch import nn

from gpulab.core.callbacks.base import Callback
from gpulab.core.callbacks.nvml_sampler import NvmlSamplerCallback
from gpulab.engines.torch.train.mfu import MfuCallback
from gpulab.hardware.nvml import GpuReading
from gpulab.measure import sampler as S


def test_cpu_sampler_is_silent():
    sampler = S.NvmlSampler("cpu").start()
    assert not sampler.available and sampler._thread is None
    summary = sampler.stop()
    assert summary.available is False and "cpu" in summary.reason and summary.gpu_utilization_pct is None


def test_sampler_thread_aggregates_readings(monkeypatch):
    values = iter(range(10, 10_000, 10))

    def fake_read(index):
        return GpuReading(available=True, reason="ok", name="Fake GPU", utilization_gpu_pct=next(values),
                          memory_used_bytes=2**30, power_w=100.0)  # fmt: skip

    monkeypatch.setattr("gpulab.hardware.nvml.read_gpu", fake_read)
    sampler = S.NvmlSampler("cpu", interval_s=0.005)
    sampler._index, sampler._reason = 0, "ok"  # as if NVML had found the GPU
    with sampler:
        assert S.wait_for_samples(sampler, 3)
        window = sampler.take_window()
    summary = sampler.summary()
    assert summary.available and summary.samples >= 3 and summary.name == "Fake GPU"
    assert summary.mean["memory_used_bytes"] == 2**30 and summary.max["utilization_gpu_pct"] >= 30
    assert window["utilization_gpu_pct"] is not None
    assert sampler._thread is None  # stopped and joined


class _Logs(Callback):
    def __init__(self):
        self.logged = []

    def on_log(self, trainer, state, metrics):
        self.logged.append(dict(metrics))


def test_callbacks_add_mfu_to_logs_and_stay_silent_without_nvml(monkeypatch):
    from gpulab import Trainer
    from gpulab.hardware import peaks

    class _Measured:
        flops_per_s = 1e9

    monkeypatch.setattr(peaks, "measure_peak", lambda *a, **k: _Measured())
    torch.manual_seed(0)
    x, y = torch.randn(256, 20), torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 1))
    mfu, nvml, logs = MfuCallback(), NvmlSamplerCallback(), _Logs()
    # MFU and NVML go first, so that the loggers after them see their metrics.
    trainer = Trainer(
        device="cpu", max_steps=12, log_every=4, batch_size=32, progress=False, callbacks=[mfu, nvml, logs]
    )
    result = trainer.fit(
        model, (x, y), loss_fn=nn.functional.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)
    )
    forward = 2 * 20 * 32 + 2 * 32 * 1
    assert mfu.flops_per_sample == forward + forward + 2 * 32  # + the hidden layer's gradient
    later = [m for m in logs.logged if "samples_per_s" in m]
    assert later and all(m["mfu_measured"] > 0 for m in later)
    assert all("gpu_util_pct" not in m for m in logs.logged)
    s = mfu.summary()
    assert s["mfu"] is None and s["mfu_measured"] == mfu.mfu_at(result.samples_per_s)["mfu_measured"]
    assert nvml.summary()["available"] is False and nvml.gpu_utilization_pct is None
