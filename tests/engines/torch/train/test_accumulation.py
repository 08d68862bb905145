"""Gradient accumulation: ``accumulate=k`` micro-batches of ``b`` train exactly like one batch of ``k*b``,
including an epoch's short last window (its loss is averaged over the micro-batches it really has)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.callbacks import Callback
from gpulab.engines.torch.train.trainer import Trainer

FEATURES = 8


def _regression(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    y = x @ torch.randn(FEATURES, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def _model() -> nn.Module:
    """No batch-dependent layers (no BatchNorm, no dropout): micro-batches add up to the big batch."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Tanh(), nn.Linear(32, 1))


class StepLog(Callback):
    def __init__(self) -> None:
        self.samples_at_step: list[int] = []

    def on_step_end(self, trainer, state):
        self.samples_at_step.append(state.samples_seen)


def _train(data, *, batch_size: int, accumulate: int, epochs: int = 2):
    model, log = _model(), StepLog()
    trainer = Trainer(
        device="cpu",
        precision="fp32",
        batch_size=batch_size,
        accumulate=accumulate,
        epochs=epochs,
        seed=3,  # the same seed: the same epoch permutation for both runs
        progress=False,
        callbacks=[log],
    )
    result = trainer.fit(
        model, data, loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)
    )
    return model, result, log


def _assert_same_params(a: nn.Module, b: nn.Module) -> None:
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_accumulate_4x16_equals_batch_64():
    data = _regression(256)
    small, r_small, log_small = _train(data, batch_size=16, accumulate=4)
    big, r_big, log_big = _train(data, batch_size=64, accumulate=1)
    assert r_small.steps == r_big.steps == 8
    assert log_small.samples_at_step == log_big.samples_at_step == [64 * i for i in range(1, 9)]
    _assert_same_params(small, big)
    # and the parameters did move: the comparison is not between two untouched models
    assert not torch.allclose(next(small.parameters()), next(_model().parameters()))


def test_short_last_window_steps_and_scaling():
    """160 samples: 10 micro-batches of 16 with accumulate=4 -> windows of 4, 4 and 2 -> 3 steps an epoch.
    A batch of 64 sees 64, 64 and 32 samples: the short window must average over its 2 micro-batches,
    not divide by 4, to give the same update."""
    data = _regression(160)
    small, r_small, log_small = _train(data, batch_size=16, accumulate=4)
    big, r_big, log_big = _train(data, batch_size=64, accumulate=1)
    assert r_small.steps == r_big.steps == 6  # 3 per epoch, 2 epochs
    assert r_small.epochs == 2
    assert log_small.samples_at_step == [64, 128, 160, 224, 288, 320] == log_big.samples_at_step
    _assert_same_params(small, big)


@pytest.mark.parametrize(
    "batches, accumulate, steps_per_epoch", [(10, 4, 3), (10, 3, 4), (9, 3, 3), (3, 8, 1)]
)
def test_steps_per_epoch_count_the_partial_window(batches, accumulate, steps_per_epoch):
    _, result, log = _train(_regression(batches * 8), batch_size=8, accumulate=accumulate, epochs=2)
    assert result.steps == 2 * steps_per_epoch
    # every window ends inside its epoch: the step count resets with each epoch's samples
    assert log.samples_at_step[steps_per_epoch - 1] == batches * 8


def test_max_steps_counts_optimizer_steps_not_micro_batches():
    model, log = _model(), StepLog()
    trainer = Trainer(
        device="cpu",
        precision="fp32",
        batch_size=16,
        accumulate=4,
        max_steps=3,
        progress=False,
        callbacks=[log],
    )
    result = trainer.fit(
        model, _regression(256), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)
    )
    assert result.steps == 3 and log.samples_at_step == [64, 128, 192]
