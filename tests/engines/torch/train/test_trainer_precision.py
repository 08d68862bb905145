"""Each precision policy through ``Trainer.fit`` on CPU: the loss goes down, mixed policies really compute
in their dtype with fp32 weights, and fp16's loss scaler skips a step whose gradient overflowed."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.callbacks import Callback
from gpulab.engines.torch.train.trainer import Trainer

FEATURES = 8
COMPUTE_DTYPE = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "fp16-mixed": torch.float16,
}


pytestmark = pytest.mark.usefixtures("restore_tf32_flags")  # a failing fit must not leak TF32 flags


def _regression(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    return x, x @ torch.randn(FEATURES, 1, generator=g)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("precision", list(COMPUTE_DTYPE))
def test_each_precision_trains_on_cpu(precision):
    seen_dtypes = set()

    def loss_fn(out, target):
        seen_dtypes.add(out.dtype)
        return F.mse_loss(out.float(), target)

    model = _model()
    trainer = Trainer(device="cpu", precision=precision, batch_size=32, epochs=4, log_every=1, progress=False)
    result = trainer.fit(
        model, _regression(), loss_fn=loss_fn, optimizer=lambda p: torch.optim.SGD(p, lr=0.05)
    )
    losses = [h["loss"] for h in result.history]
    assert result.precision == precision and result.steps == 32
    assert all(map(lambda v: v == v and abs(v) != float("inf"), losses))  # finite
    assert losses[-1] < 0.2 * losses[0]
    assert seen_dtypes == {COMPUTE_DTYPE[precision]}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay fp32
    # fp16 may skip its first steps while the loss scale (2**16) comes down to what the gradients allow.
    assert result.skipped_steps <= (3 if precision == "fp16-mixed" else 0)


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    """An inf gradient on the 3rd step: that step leaves the parameters alone, the others move them."""
    poisoned_call = 3
    calls = 0

    def loss_fn(out, target):
        nonlocal calls
        calls += 1
        return F.mse_loss(out.float(), target)

    model = _model()
    first = model[0].weight
    first.register_hook(lambda grad: grad * float("inf") if calls == poisoned_call else grad)

    class Snapshots(Callback):
        def __init__(self):
            self.params = []

        def on_fit_start(self, trainer, state):
            self.params.append(_params(trainer.model))

        def on_step_end(self, trainer, state):
            self.params.append(_params(trainer.model))

    snaps = Snapshots()
    init_scale = 2.0**10
    trainer = Trainer(
        device="cpu",
        precision="fp16-mixed",
        batch_size=32,
        epochs=1,
        init_scale=init_scale,
        growth_interval=1000,  # no growth during this short fit
        progress=False,
        callbacks=[snaps],
    )
    result = trainer.fit(
        model, _regression(), loss_fn=loss_fn, optimizer=lambda p: torch.optim.SGD(p, lr=0.05)
    )

    assert result.steps == 8 and result.skipped_steps == 1
    assert trainer.runtime.precision.scaler.get_scale() == init_scale * 0.5  # backoff_factor
    unchanged = [
        all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        for before, after in zip(snaps.params, snaps.params[1:], strict=False)
    ]
    assert unchanged == [i + 1 == poisoned_call for i in range(8)]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert result.final_loss is not None and result.final_loss == result.final_loss  # not NaN
