"""``compile_check``: a compiler that returns wrong gradients is caught at the first batch and the run goes on
eagerly (warned, ``compiled`` False, summary.json says why); a correct one passes and changes nothing.

The wrong compiler is a fake backend (aot_autograd whose backward zeroes one gradient, as torch 2.13's
inductor did to a conv before a MaxPool2d on the CPU): no inductor compile, so the tests take a second.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from functorch.compile import make_boxed_func
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch.nn import functional as F

from gpulab.engines.torch.runtime.compile import CompileFallback
from gpulab.engines.torch.runtime.compile_check import FirstStepCheck
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import GpulabWarning

WRONG_BACKEND, RIGHT_BACKEND = "gpulab_test_wrong_gradients", "gpulab_test_right_gradients"


def _forward_as_is(gm, _example_inputs):
    return make_boxed_func(gm.forward)


def _backward_zeroing_one_gradient(gm, _example_inputs):
    def run(*args):
        grads = list(gm(*args))
        first = next(i for i, g in enumerate(grads) if g is not None)  # the first layer's weight
        grads[first] = torch.zeros_like(grads[first])
        return grads

    return make_boxed_func(run)


def _forward_drawing_one_more(gm, _example_inputs):
    """Right results, but one extra random draw after them: the check must leave the compiled draws."""

    def run(*args):
        out = gm(*args)
        torch.rand(1)
        return out

    return make_boxed_func(run)


for name, fw, bw in (
    (WRONG_BACKEND, _forward_as_is, _backward_zeroing_one_gradient),
    (RIGHT_BACKEND, _forward_drawing_one_more, _forward_as_is),
):
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(name=name)(aot_autograd(fw_compiler=fw, bw_compiler=bw))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _data(n: int = 256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return x, x @ torch.randn(8, 1, generator=g)


def _fit(**settings):
    # Dropout and BatchNorm: the check must put back the RNG draws and running statistics it used.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    trainer = Trainer(device="cpu", precision="fp32", batch_size=32, epochs=2, progress=False, **settings)
    result = trainer.fit(model, _data(), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
    return model.state_dict(), result


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_wrong_gradients_are_caught_at_the_first_batch_and_the_run_is_the_eager_one():
    eager, _ = _fit()
    unchecked, _ = _fit(compile=True, compile_backend=WRONG_BACKEND)
    assert not _same(unchecked, eager)  # without the check the wrong gradients train silently
    with pytest.warns(
        GpulabWarning, match=r"compile_check: .* differs from eager in the gradient of 0\.weight "
    ):
        checked, result = _fit(compile=True, compile_backend=WRONG_BACKEND, compile_check=True)
    assert result.compiled is False and result.steps == 16
    report = result.extras["compile"]
    assert report["check"]["agrees"] is False and "0.weight (Linear)" in report["check"]["differs_in"]
    assert report["fell_back"].startswith("compile_check: the compiled model's first batch differs")
    assert _same(checked, eager)  # the eager step stood: the whole run is the eager run


def test_right_gradients_pass_and_the_run_is_exactly_the_unchecked_one():
    unchecked, plain = _fit(compile=True, compile_backend=RIGHT_BACKEND)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of any kind
        checked, result = _fit(compile=True, compile_backend=RIGHT_BACKEND, compile_check=True)
    assert result.compiled is True and "fell_back" not in result.extras["compile"]
    check = result.extras["compile"]["check"]
    assert check["agrees"] is True and check["largest_difference"] < 1e-5
    assert _same(checked, unchecked)  # same weights, BatchNorm statistics, dropout draws
    assert [h["loss"] for h in result.history] == [h["loss"] for h in plain.history]


def test_the_check_says_where_it_does_not_run():
    fallback = CompileFallback(nn.Linear(2, 1), None)
    assert FirstStepCheck(True, fallback, 2, False).report == {
        "skipped": "runs on one process only (2 ranks here)"
    }
    assert "micro_batch: auto" in FirstStepCheck(True, fallback, 1, True).report["skipped"]
    assert not FirstStepCheck(True, nn.Linear(2, 1), 1, False).pending  # compile off: nothing to check
    assert FirstStepCheck(True, fallback, 1, False).pending
