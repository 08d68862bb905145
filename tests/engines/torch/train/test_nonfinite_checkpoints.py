"""A NaN never becomes a checkpoint: not through the loss window, not through the parameters, and pruning
never removes the last finite checkpoint."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.callbacks import Callback
from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.engines.torch.state.api import (
    capture_rng,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from gpulab.engines.torch.train.trainer import Trainer


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.spare = nn.Parameter(torch.zeros(3))  # not used by forward: its NaN cannot reach the loss

    def forward(self, x):
        return self.body(x)


class NanLossFrom:
    """MSE, multiplied by NaN from the ``start``-th call on (a model that blows up)."""

    def __init__(self, start: int) -> None:
        self.start, self.calls = start, 0

    def __call__(self, out, target):
        self.calls += 1
        loss = F.mse_loss(out, target)
        return loss * float("nan") if self.calls >= self.start else loss


class PoisonSpare(Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, trainer, state):
        if state.global_step == self.at:
            with torch.no_grad():
                trainer.model.spare.fill_(float("nan"))


def _fit(tmp_path, loss_fn, callbacks=()):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    trainer = Trainer(
        device="cpu",
        precision="fp32",
        progress=False,
        tensorboard=False,
        batch_size=32,  # 8 steps an epoch: checkpoints at 5, 8 (epoch end), 10, 15, 16, 20
        max_steps=20,
        log_every=50,  # the loss is read only at the end: checkpoints fall between reads
        checkpoint_every=5,
        keep_last=2,
        out_dir=str(tmp_path),
        callbacks=callbacks,
    )
    trainer.fit(Net(), (x, y), loss_fn=loss_fn, optimizer=lambda p: torch.optim.SGD(p, lr=0.01))


def _all_finite(path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_checkpoint(path).model_state.values())


def test_a_nan_loss_between_logs_stops_before_the_next_checkpoint(tmp_path):
    with pytest.raises(NonFiniteLossError, match="at step 7 .*checkpoint 8 was not written"):
        _fit(tmp_path, NanLossFrom(start=7))
    root = tmp_path / "checkpoints"
    assert [p.name for p in list_checkpoints(root)] == ["step-00000005"]
    assert (root / "latest").read_text().strip() == "step-00000005"
    assert _all_finite(root / "step-00000005")


def test_a_nan_parameter_is_never_checkpointed(tmp_path):
    with pytest.raises(NonFiniteLossError, match="parameters became NaN/inf by step 8 .*'spare'"):
        _fit(tmp_path, F.mse_loss, callbacks=[PoisonSpare(at=6)])
    root = tmp_path / "checkpoints"
    assert (root / "latest").read_text().strip() == "step-00000005"
    assert [p.name for p in list_checkpoints(root)] == ["step-00000005"]
    assert _all_finite(root / "step-00000005")


def test_pruning_keeps_the_newest_checkpoint_whose_metrics_are_finite(tmp_path):
    for step, loss in ((1, 0.5), (2, 0.4), (3, math.nan), (4, math.inf), (5, math.nan)):
        save_checkpoint(
            tmp_path,
            step=step,
            model_state={"w": torch.ones(2)},
            state={"rng": capture_rng()},
            meta={"metrics": {"loss": loss}},
            keep_last=2,
        )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000004", "step-00000005"]
