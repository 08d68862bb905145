"""`gpulab profile`: the instrumented loop, its files, the breakdown, and an input-bound diagnosis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from step_figure import assert_one_step_figure
from torch import nn
from torch.utils.data import Dataset

from gpulab.cli import main
from gpulab.engines.torch.profile import profile_loop
from gpulab.engines.torch.runtime import Runtime
from gpulab.measure.profile_report import ProfileOptions

QUICK = ProfileOptions(warmup=1, steps=6, active=2, measure_peak=False)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))


def _tensors(n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 20, generator=g), torch.randn(n, 1, generator=g)


class SlowDataset(Dataset):
    """A sample costs 5 ms to "decode": with a tiny model the step waits for data most of the time, even
    beside another test process."""

    def __init__(self, n: int = 256) -> None:
        self.x, self.y = _tensors(n)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        time.sleep(0.005)
        return self.x[i], self.y[i]


def _profile(data, tmp_path, batch_size=32):
    with Runtime("cpu", "fp32") as rt:
        opt = lambda p: torch.optim.Adam(p, lr=1e-3)  # noqa: E731
        return profile_loop(
            rt,
            _mlp(),
            opt,
            nn.functional.mse_loss,
            data,
            batch_size=batch_size,
            out_dir=tmp_path,
            options=QUICK,
        )


def test_profile_writes_a_chrome_trace_the_table_and_a_breakdown_that_adds_up(tmp_path):
    result = _profile(_tensors(), tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    assert len(events) > 50
    assert any("ProfilerStep" in e.get("name", "") for e in events)
    assert any(e.get("name", "").startswith("aten::") for e in events)
    assert "aten::" in (tmp_path / "key_averages.txt").read_text()

    report = json.loads((tmp_path / "profile.json").read_text())
    b = report["breakdown_s"]
    named = sum(b[k] for k in ("data", "forward", "backward", "communication", "optimizer"))
    assert report["breakdown_sum_s"] == pytest.approx(b["step"], rel=0.10)
    assert named == pytest.approx(b["step"], rel=0.10)  # the phases cover the step: little idle
    assert b["communication"] == 0.0  # one process
    assert min(b["forward"], b["backward"], b["optimizer"]) > 0
    forward = 2 * 20 * 64 + 2 * 64 * 1
    backward = forward + 2 * 64 * 1  # weight gradients, and the hidden layer's (the data needs none)
    assert report["flops_per_step"] == 32 * (forward + backward)
    assert report["diagnosis"]["bound"] in ("host-bound", "memory-bound", "compute-bound")
    assert report["memory"]["kind"] == "process RSS" and report["nvml"]["available"] is False
    assert set(result.files) == {"trace", "key_averages", "profile"}


def test_a_slow_dataset_is_diagnosed_input_bound(tmp_path):
    result = _profile(SlowDataset(), tmp_path, batch_size=16)
    assert result.breakdown["data"] > 0.25 * result.breakdown["step"]
    assert result.diagnosis["bound"] == "input-bound"
    assert "workers" in result.diagnosis["fix"]


def test_cli_profile_prints_the_breakdown(tmp_path, capsys):
    code = main(
        ["profile", "mlp", "--out", str(tmp_path), "--device", "cpu", "--no-peak", "--warmup", "1", "--steps", "3",
         "--active", "1", "--set", "options.samples=500"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "data wait" in out and "backward" in out and "fix:" in out
    title, top = out.splitlines()[:2]
    assert title.startswith("mlp on cpu (fp32), batch ") and " steps" in title  # whole, not wrapped
    assert top.startswith("┏")
    assert_one_step_figure(out, json.loads((tmp_path / "profile.json").read_text()))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert json.loads((tmp_path / "profile.json").read_text())["recipe"] == "mlp"


def test_cli_profile_user_mistake_is_one_line(tmp_path, capsys):
    assert main(["profile", "nosuch", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_profile_on_cpu_prints_no_kineto_chatter(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "profile", "mlp", "--out", str(tmp_path), "--device", "cpu", "--no-peak",
         "--warmup", "1", "--steps", "2", "--active", "1", "--set", "options.samples=300"],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "USDT" not in proc.stdout + proc.stderr


def test_profile_runs_a_model_called_with_dict_batches_that_returns_its_own_loss(tmp_path):
    """The profiler calls model and loss by the Trainer's rule (runtime/step_call.py): no loss_fn here."""

    class OwnLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def forward(self, features, labels=None):
            out = self.net(features)
            return {"logits": out, "loss": nn.functional.mse_loss(out, labels)}

    x, y = _tensors()
    with Runtime("cpu", "fp32") as rt:
        result = profile_loop(
            rt,
            OwnLoss(),
            lambda p: torch.optim.Adam(p, lr=1e-3),
            None,
            {"features": x, "labels": y},
            batch_size=32,
            out_dir=tmp_path,
            options=QUICK,
        )
    forward = 2 * 20 * 64 + 2 * 64 * 1  # the same count as the tuple batches' test above
    backward = forward + 2 * 64 * 1
    assert result.report["flops_per_step"] == 32 * (forward + backward)
    assert (tmp_path / "trace.json").is_file()


def test_profile_runs_the_step_train_would_run_channels_last_checkpointing_and_fused_optimizer(
    tmp_path, monkeypatch
):
    """The profiled step is the trained one: the model and inputs in channels_last, the named blocks
    recomputed in backward and the optimizer's fused setting as the Trainer's Runtime would set them."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import spy_recipe

    from gpulab.engines.torch.profile import profile_recipe

    seen = spy_recipe.SEEN
    user = {"recipe": "spy_recipe:build", "channels_last": True, "activation_checkpointing": "Block",
            "fuse_optimizer": False}  # fmt: skip
    options = ProfileOptions(warmup=1, steps=2, active=1, measure_peak=False)
    result = profile_recipe(user, tmp_path, options)
    forwards = [v for v in seen["input_nhwc"] if v is not None]
    assert forwards and all(seen["input_nhwc"]) and all(seen["weight_nhwc"])
    # Each training forward ran the block twice (once more in backward); the FLOP count's fake forward
    # and backward run it too, so compare with the forward count.
    assert seen["block_calls"][0] >= 2 * len(forwards) - 2
    assert seen["fused"][-1].defaults["fused"] is None  # fuse_optimizer: false reached the Runtime
    report = json.loads((tmp_path / "profile.json").read_text())
    assert report["channels_last"].startswith("on") and report["activation_checkpointing"] == ["Block"]
    assert result.report["recipe"] == "spy_recipe:build"
