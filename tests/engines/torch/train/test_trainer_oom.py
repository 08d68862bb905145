"""Memory in the Trainer: ``micro_batch: auto`` recovers from out-of-memory errors (injected through
``GPULAB_INJECT_OOM``) on the same trajectory, keeps its smaller micro-batch across a resume, and lets
every other error through; ``batch_size: auto`` under ``memory_limit`` picks a batch and trains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.engines.torch.runtime.memory import memory_limit_bytes
from gpulab.engines.torch.runtime.oom import INJECT_ENV, MicroBatchOomError
from gpulab.engines.torch.state.api import list_checkpoints
from gpulab.engines.torch.train.oom_step import GuardedStep
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _data(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)


def _model() -> nn.Module:
    torch.manual_seed(0)  # no batch-dependent layer: the split cannot change the result, only rounding
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def _fit(model=None, loss_fn=F.mse_loss, resume=None, **settings):
    settings = {"device": "cpu", "precision": "fp32", "progress": False, "epochs": 1, **settings}
    trainer = Trainer(**settings)
    model = model if model is not None else _model()
    opt = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)  # noqa: E731
    result = trainer.fit(model, _data(), loss_fn=loss_fn, optimizer=opt, resume=resume)
    return model, result


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_injected_oom_halves_the_micro_batch_and_stays_on_the_trajectory(monkeypatch):
    monkeypatch.setenv(INJECT_ENV, "0:0")  # rank 0 runs out in the very first attempt
    guarded, result = _fit(batch_size=16, micro_batch="auto")
    monkeypatch.delenv(INJECT_ENV)
    assert result.steps == 16  # 256 samples, 16 a step: the step that ran out was redone, not skipped

    oom = result.to_json()["oom"]
    assert (oom["micro_batch"], oom["accumulate"]) == (8, 2)
    (event,) = oom["oom_recoveries"]
    assert (event["micro_batch_before"], event["accumulate_before"]) == (16, 1)
    assert (event["micro_batch"], event["accumulate"], event["attempt"]) == (8, 2, 0)

    started_small, small = _fit(batch_size=8, accumulate=2, micro_batch="auto")
    assert small.to_json()["oom"]["oom_recoveries"] == []
    assert _max_diff(guarded, started_small) < 1e-5
    # ... and the guarded step is the plain accumulation step, exactly, when nothing runs out.
    plain, plain_result = _fit(batch_size=8, accumulate=2)
    assert "oom" not in plain_result.to_json()
    assert all(torch.equal(p, q) for p, q in zip(plain.parameters(), started_small.parameters(), strict=True))


def test_resume_keeps_the_smaller_micro_batch_and_is_bit_exact(tmp_path, monkeypatch):
    common = {"batch_size": 16, "micro_batch": "auto", "max_steps": 12, "checkpoint_every": 4}
    monkeypatch.setenv(INJECT_ENV, "0:0")
    full, _ = _fit(checkpoint_dir=str(tmp_path / "a"), **common)
    monkeypatch.delenv(INJECT_ENV)
    step8 = next(p for p in list_checkpoints(tmp_path / "a") if p.name.endswith("00008"))

    resumed, result = _fit(checkpoint_dir=str(tmp_path / "b"), resume=str(step8), **common)
    oom = result.to_json()["oom"]
    assert (oom["micro_batch"], oom["accumulate"]) == (8, 2)  # not back at 16
    assert len(oom["oom_recoveries"]) == 1  # the recovery before the checkpoint is still reported
    assert all(torch.equal(p, q) for p, q in zip(full.parameters(), resumed.parameters(), strict=True))


def test_other_errors_pass_through(monkeypatch):
    monkeypatch.setenv(INJECT_ENV, "0:5")

    def broken(out, target):
        raise ValueError("not an out-of-memory error")

    with pytest.raises(ValueError, match="not an out-of-memory error"):
        _fit(batch_size=16, micro_batch="auto", loss_fn=broken)


def test_out_of_memory_at_micro_batch_one_stops_with_one_line(monkeypatch):
    monkeypatch.setenv(INJECT_ENV, "0:0")
    with pytest.raises(MicroBatchOomError, match="even at micro-batch 1") as err:
        _fit(batch_size=1, micro_batch="auto", max_steps=2)
    assert "\n" not in str(err.value)


def test_micro_batch_auto_is_refused_with_sharded_parameters():
    strategy = SimpleNamespace(checkpoint_layout="sharded", name="fsdp2")
    trainer = SimpleNamespace(runtime=SimpleNamespace(strategy=strategy), settings=None)
    with pytest.raises(ConfigError, match="micro_batch: auto does not work with strategy 'fsdp2'") as err:
        GuardedStep(trainer)
    assert "\n" not in str(err.value)


def test_batch_size_auto_under_a_memory_limit_picks_a_batch_and_trains():
    limit = 50_000  # bytes of tensors: parameters, SGD momentum, the batch and the step's activations
    model, result = _fit(batch_size="auto", memory_limit=limit, max_steps=3)
    search = result.extras["batch_search"]
    assert search["limit_bytes"] == limit and search["trials"]
    assert 1 <= result.batch_size == search["batch_size"] < 256
    assert all(t["peak_bytes"] <= limit for t in search["trials"] if t["fits"])
    assert result.steps == 3 and result.final_loss is not None
    assert result.to_json()["memory"]["limit_bytes"] == limit
    assert memory_limit_bytes("cpu") is None  # the limit held for the fit only


@pytest.mark.slow
def test_cli_batch_size_auto_with_a_memory_limit(tmp_path):
    out = tmp_path / "run"
    proc = gpulab(
        "train", "mlp", "--out", str(out), "--max-steps", "5", "--batch-size", "auto",
        "--set", "memory_limit=1000000", "--set", "mfu=false", "--device", "cpu", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["batch_size"] == "auto"
    assert summary["batch_size"] == summary["batch_search"]["batch_size"] >= 1
    assert summary["batch_search"]["limit_bytes"] == 1_000_000 == summary["memory"]["limit_bytes"]
    assert summary["steps"] == 5
    # The pick is said, not only recorded: "batch_size: auto picked N (largest batch in 1..M whose ...)"
    assert f"batch_size: auto picked {summary['batch_size']} (largest batch in 1.." in proc.stdout
