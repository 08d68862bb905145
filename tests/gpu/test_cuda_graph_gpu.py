"""``cuda_graph`` on a real GPU: the captured whole step trains as eager does (loss trajectories within
float tolerance on the mlp and chargpt recipes), the fp16 scaler skips the same steps inside the graph, a
schedule reaches the captured LR, and a real host read inside the model falls back in one line. Skipped
without CUDA; the speed-up is a benchmark's figure (benchmarks/overhead.py, gpulab bench transformer), not
asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.engines.torch.train import graph_step
from gpulab.engines.torch.train.trainer import Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _train(tmp_path: Path, name: str, *args: str) -> tuple[dict, list[float]]:
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", *args, "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return summary, [r["loss"] for r in rows if "loss" in r]


@pytest.mark.parametrize(
    ("recipe", "precision", "rtol"),
    [("mlp", "fp32", 1e-4), ("chargpt", "bf16-mixed", 2e-2), ("chargpt", "fp16-mixed", 2e-2)],
)
def test_graph_and_eager_losses_agree(tmp_path, recipe, precision, rtol):
    common = [recipe, "--device", "cuda", "--precision", precision, "--max-steps", "60",
              "--set", "log_every=10", "--set", "mfu=false", "--set", "deterministic=true"]  # fmt: skip
    _, eager = _train(tmp_path, "eager", *common, "--set", "cuda_graph=false")  # auto is the default
    summary, graph = _train(tmp_path, "graph", *common, "--set", "cuda_graph=true")
    assert summary["cuda_graph"]["mode"] == "graph", summary["cuda_graph"]
    assert summary["cuda_graph"]["captures"] == 1 and summary["cuda_graph"]["replays"] >= 50
    assert len(graph) == len(eager) == 6
    assert graph == pytest.approx(eager, rel=rtol)


def _fit(graph, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1024, 32, generator=g), torch.randn(1024, 1, generator=g)
    settings = {"device": "cuda", "precision": "fp32", "progress": False, "batch_size": 64, "log_every": 8}
    trainer = Trainer(cuda_graph=graph, **{**settings, **kw})
    result = trainer.fit(
        model,
        (x, y),
        loss_fn=F.mse_loss,
        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
        scheduler=lambda opt, total: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / total),
    )
    return model, result


def test_schedule_and_fp16_scaler_inside_the_graph():
    # init_scale 2**40 overflows fp16 at first: the scaler must skip and back off inside the graph too.
    eager, eager_result = _fit(False, max_steps=48, precision="fp16-mixed", init_scale=2.0**40)
    graph, result = _fit(True, max_steps=48, precision="fp16-mixed", init_scale=2.0**40)
    assert result.extras["cuda_graph"]["mode"] == "graph"
    assert result.skipped_steps == eager_result.skipped_steps > 0
    assert [h["lr"] for h in result.history] == pytest.approx([h["lr"] for h in eager_result.history])
    for p, q in zip(eager.parameters(), graph.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-5)


class _HostRead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 1)

    def forward(self, x):
        if x.abs().max().item() > 1e6:  # a host read: a CUDA capture refuses it
            x = x.clamp(-1e6, 1e6)
        return self.layer(x)


def _host_read_fit():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 32, generator=g), torch.randn(256, 1, generator=g)
    trainer = Trainer(
        device="cuda", progress=False, batch_size=32, max_steps=12, log_every=4, cuda_graph=True
    )
    result = trainer.fit(_HostRead(), (x, y), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.AdamW(p))
    assert result.steps == 12 and result.final_loss == result.final_loss  # trained on, finite
    return result.extras["cuda_graph"]


def test_a_host_read_inside_the_model_is_named_before_capture():
    report = _host_read_fit()
    assert report["mode"] == "eager" and "reads a tensor on the host (.item()" in report["reason"], report
    assert report["captures"] == 0


def test_a_real_capture_that_fails_falls_back_in_one_line(monkeypatch):
    class Blind:  # no probe: the CUDA capture itself must refuse the .item() and the run go on eagerly
        found = None

        def __init__(self, device):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(graph_step, "HostReadProbe", Blind)
    report = _host_read_fit()
    assert report["mode"] == "eager" and "capture failed" in report["reason"], report


def test_auto_says_what_it_chose():
    _, result = _fit("auto", max_steps=24)
    assert result.extras["cuda_graph"]["reason"].startswith("cuda_graph auto: ")
