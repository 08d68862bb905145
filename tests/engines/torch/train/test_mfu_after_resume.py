"""MFU of a resumed run: FLOPs counted on its first real step (a sharded model) are divided by that
step's samples, not by every sample the run had seen before the checkpoint."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpulab.core.state import FitState
from gpulab.engines.torch.train.mfu import MfuCallback


def test_first_step_flops_are_per_sample_of_that_step_after_a_resume(monkeypatch):
    # Counted on the first real step (the default: no compile, no micro_batch auto).
    runtime = SimpleNamespace(
        world_size=1, device=torch.device("cpu"), precision=SimpleNamespace(name="fp32")
    )
    settings = SimpleNamespace(compile=False, micro_batch=None)
    trainer = SimpleNamespace(runtime=runtime, model=torch.nn.Linear(2, 2), settings=settings)
    state = FitState(global_step=100, samples_seen=6400)  # restored from a checkpoint
    callback = MfuCallback(measure_peak=False)
    callback.on_fit_start(trainer, state)
    torch.ones(8, 16) @ torch.ones(16, 4)  # the first step: 2 * 8 * 16 * 4 FLOPs for a batch of 8
    state.global_step, state.samples_seen = 101, 6408
    callback.on_step_end(trainer, state)
    assert callback.flops_per_sample == 2 * 8 * 16 * 4 / 8


def test_a_resumed_fit_reports_the_throughput_of_its_own_steps(tmp_path):
    from torch.nn import functional as F

    from gpulab.engines.torch.train.trainer import Trainer

    x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))

    def fit(max_steps: int, resume=None):
        trainer = Trainer(device="cpu", progress=False, tensorboard=False, batch_size=16, max_steps=max_steps,
                          out_dir=str(tmp_path))  # fmt: skip
        return trainer.fit(torch.nn.Linear(4, 1), (x, x.sum(1, keepdim=True)), loss_fn=F.mse_loss,
                           optimizer=lambda p: torch.optim.SGD(p, lr=0.01), resume=resume)  # fmt: skip

    fit(4)
    result = fit(10, resume="latest")
    # timed from the end of this fit's first step (its warm-up): steps 6..10, 5 x 16 samples, over the
    # wall time less what is not training (its checkpoints)
    timed = result.train_seconds - result.extras["untimed_s"]
    assert result.samples_per_s * timed == pytest.approx(5 * 16, rel=1e-3)
