"""What a fit measures about itself: MFU (logged, shown by the progress bar, in the summary), memory, the
time spent waiting for data, GPU sampling that stays silent on a CPU, and the diagnosis naming the
bound and its fix -- through ``gpulab train`` and through the Trainer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from gpulab.core.callbacks import Callback, ProgressBar
from gpulab.core.callbacks.nvml_sampler import NvmlSamplerCallback
from gpulab.engines.torch.train.mfu import MfuCallback
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.measure.diagnosis import BOUNDS


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _data(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return x, x @ torch.randn(8, 1, generator=g)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def _fit(data=None, *, callbacks=(), **settings):
    settings = {"device": "cpu", "precision": "fp32", "progress": False, "batch_size": 32, **settings}
    trainer = Trainer(callbacks=callbacks, **settings)
    result = trainer.fit(
        _model(),
        data if data is not None else _data(),
        loss_fn=F.mse_loss,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05),
    )
    return trainer, result


@pytest.mark.slow
def test_train_summary_reports_mfu_memory_data_wait_and_the_diagnosis(tmp_path):
    out = tmp_path / "run"
    proc = gpulab(
        "train",
        "mlp",
        "--out",
        str(out),
        "--max-steps",
        "20",
        "--set",
        "log_every=5",
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())

    mfu = summary["mfu"]
    assert mfu["flops_per_sample"] > 0 and mfu["achieved_flops_per_s"] > 0
    assert 0 < mfu["mfu_measured"] < 1.5
    assert mfu["peaks"]["measured_flops_per_s"] > 0
    assert summary["diagnosis"]["bound"] in BOUNDS and summary["diagnosis"]["fix"]
    assert summary["diagnosis"]["bound"] in proc.stdout  # the CLI prints the bound and the fix too
    assert summary["memory"]["peak_bytes"] > 0 and summary["memory"]["kind"] == "process RSS"
    assert summary["data_wait_s"] >= 0
    assert summary["nvml"]["available"] is False  # a CPU: a reason, no samples, no error
    assert (summary["strategy"], summary["world_size"], summary["batch_size"]) == ("single", 1, 64)
    assert "oom" not in summary and "batch_search" not in summary  # features not asked for

    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mfu_measured"] > 0 for r in logged if r.get("samples_per_s"))


class SlowSamples(Dataset):
    """A Dataset whose every sample takes a while to load (decoding, a slow disk)."""

    def __init__(self, n: int = 64, seconds: float = 0.002) -> None:
        self.x, self.y = _data(n)
        self.seconds = seconds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.seconds)
        return self.x[i], self.y[i]


def test_slow_dataset_is_diagnosed_input_bound():
    # 30 ms a sample, 480 ms a batch (a sleep: no CPU): loading dominates even when the machine's load
    # (12 on 2 cores, seen) slows the step's compute fivefold.
    trainer, result = _fit(SlowSamples(seconds=0.03), batch_size=16, epochs=3)
    report = result.to_json()
    assert report["data_wait_s"] > 0.5 * result.train_seconds > 0
    diagnosis = report["diagnosis"]
    assert diagnosis["bound"] == "input-bound", diagnosis
    assert "workers" in diagnosis["fix"] and diagnosis["fractions"]["data"] > 0.5


class ThreadWatch(Callback):
    def on_fit_start(self, trainer, state):
        self.ran = trainer.callbacks.callbacks  # every callback the fit runs (the loop's list)

    def on_step_end(self, trainer, state):
        self.names = {t.name for t in threading.enumerate()}


def test_library_fit_skips_mfu_and_nvml_starts_no_thread_on_cpu():
    watch = ThreadWatch()
    trainer, result = _fit(callbacks=[watch], max_steps=3)
    kinds = [type(cb) for cb in watch.ran]
    assert MfuCallback not in kinds  # off by default for the library: FLOP counting costs ~1 s a fit
    assert NvmlSamplerCallback in kinds
    assert "gpulab-nvml-sampler" not in watch.names
    assert "mfu" not in result.to_json() and result.to_json()["nvml"]["samples"] == 0
    assert result.to_json()["diagnosis"]["bound"] in BOUNDS


def test_mfu_reaches_history_loggers_and_progress_bar():
    seen: list[dict] = []

    class Logger(ThreadWatch):
        def on_log(self, trainer, state, metrics):
            seen.append(dict(metrics))

    logger = Logger()
    trainer, result = _fit(callbacks=[logger], mfu=True, progress=True, max_steps=6, log_every=2)
    kinds = [type(cb) for cb in logger.ran]
    assert kinds.index(MfuCallback) < kinds.index(ProgressBar) < kinds.index(Logger)
    logged = [h for h in result.history if h.get("samples_per_s")]
    assert logged and all(h["mfu_measured"] > 0 for h in logged)
    assert all("mfu_measured" in m for m in seen if m.get("samples_per_s"))
    bar = next(cb for cb in logger.ran if isinstance(cb, ProgressBar))
    assert "MFU" in bar._progress.tasks[0].fields["speed"]
    assert result.to_json()["mfu"]["flops_per_sample"] > 0


def test_a_tiny_cpu_memory_limit_does_not_make_the_run_memory_bound():
    # The CPU limit is a budget for tensors; the process's resident set (hundreds of MiB of interpreter
    # and libraries) is not compared with it.
    _, result = _fit(epochs=2, memory_limit=2**20)
    assert result.extras["memory"]["limit_bytes"] == 2**20
    assert result.extras["diagnosis"]["bound"] != "memory-bound"


def test_a_fit_failing_in_its_first_step_leaves_no_flop_counter_running(monkeypatch):
    # A sharded model's FLOPs are counted on the first real step; a fit failing there must close it.
    monkeypatch.setattr("gpulab.engines.torch.train.mfu.holds_shards", lambda model: True)

    def broken_loss(out, target):
        raise RuntimeError("boom")

    trainer = Trainer(device="cpu", precision="fp32", progress=False, batch_size=32, epochs=1,
                      callbacks=[MfuCallback(measure_peak=False)])  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(_model(), _data(), loss_fn=broken_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert torch._C._len_torch_dispatch_stack() == 0


def test_flops_are_counted_on_the_first_real_step_not_by_a_separate_trace(monkeypatch):
    # The separate fake-tensor trace cost the mlp recipe 50-110 ms before its first step; the first real
    # optimizer step (two micro-batches here) gives the same count for nothing.
    from gpulab.engines.torch.measure import flops

    x, y = _data()
    expected = flops.training_step_flops(_model(), F.mse_loss, (x[:32], y[:32])).per_sample

    def no_trace(*args, **kwargs):
        raise AssertionError("a separate FLOP trace ran before the first step")

    monkeypatch.setattr(flops, "training_step_flops", no_trace)
    mfu = MfuCallback(measure_peak=False)
    _fit(callbacks=[mfu], max_steps=4, accumulate=2)
    assert mfu.note == "" and mfu.flops_per_sample == expected
    assert torch._C._len_torch_dispatch_stack() == 0  # the counter is off again


def test_mfu_never_exceeds_the_peak_it_divides_by(tmp_path, monkeypatch):
    # A cached peak measured while the machine was busy is beaten by the run: it is re-measured (and
    # raised to the run's figure if need be) and the summary says so, instead of printing "152 %".
    from gpulab.hardware.peaks import cache_path, measure_peak

    monkeypatch.setenv("GPULAB_CACHE_DIR", str(tmp_path))
    measure_peak("cpu", "fp32")
    entries = json.loads(cache_path().read_text())
    for entry in entries.values():
        entry["flops_per_s"] = 1.0
    cache_path().write_text(json.dumps(entries))
    with pytest.warns(UserWarning, match="above the cached fp32 peak"):
        trainer, result = _fit(mfu=True, max_steps=12, log_every=4)
    logged = [h["mfu_measured"] for h in trainer.history if "mfu_measured" in h]
    assert logged and all(0 < m <= 1 for m in logged)
    assert 0 < result.extras["mfu"]["mfu_measured"] <= 1
    assert "re-measured" in result.extras["mfu"]["note"]
