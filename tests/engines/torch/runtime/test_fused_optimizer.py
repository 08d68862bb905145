"""The switch to fused optimizer kernels: done only where it is what fused=True would have given."""

import copy

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.fused_optimizer import use_fused_kernels
from gpulab.engines.torch.runtime.precision import FP16Mixed


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def train(net, opt, steps=20):
    torch.manual_seed(1)
    for _ in range(steps):
        loss = net(torch.randn(32, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
def test_left_open_becomes_fused_and_trains_the_same(cls):
    kwargs = {"lr": 1e-2, **({"momentum": 0.9} if cls is torch.optim.SGD else {})}
    net_a, net_b = model(), model()
    plain = cls(net_a.parameters(), **kwargs)
    switched = cls(net_b.parameters(), **kwargs)
    reason = use_fused_kernels(switched)
    assert "fused kernels" in reason
    assert all(group["fused"] for group in switched.param_groups)
    for a, b in zip(train(net_a, plain), train(net_b, switched), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "build, why",
    [
        (lambda p: torch.optim.Adam(p, foreach=False), "chosen explicitly"),
        (lambda p: torch.optim.Adam(p, fused=False), "chosen explicitly"),
        (lambda p: torch.optim.RMSprop(p), "only"),
        (lambda p: type("MyAdam", (torch.optim.Adam,), {})(p), "only"),
        (lambda p: torch.optim.Adam(p, differentiable=True), "differentiable"),
    ],
    ids=["foreach-False", "fused-False", "rmsprop", "subclass", "differentiable"],
)
def test_explicit_choices_and_other_classes_are_kept(build, why):
    opt = build(model().parameters())
    before = copy.deepcopy([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
    reason = use_fused_kernels(opt)
    assert "as given" in reason and why in reason
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == before


def test_an_optimizer_with_state_is_kept():
    net = model()
    opt = torch.optim.Adam(net.parameters())
    train(net, opt, steps=1)
    assert "already has state" in use_fused_kernels(opt)
    assert opt.param_groups[0]["fused"] is None


def test_integer_parameters_are_kept():
    opt = torch.optim.SGD(
        [nn.Parameter(torch.zeros(3, dtype=torch.float64)), torch.zeros(2, dtype=torch.int64)]
    )
    assert "torch.int64" in use_fused_kernels(opt)


def test_runtime_switches_by_default_and_says_so():
    with Runtime("cpu", "fp32") as rt:
        _, opt = rt.setup(model(), lambda p: torch.optim.Adam(p, lr=1e-3))
        assert opt.param_groups[0]["fused"] is True
        assert "fused kernels" in rt.describe()["reasons"]["optimizer"]
    with Runtime("cpu", "fp32", fuse_optimizer=False) as rt:
        _, opt = rt.setup(model(), lambda p: torch.optim.Adam(p, lr=1e-3))
        assert opt.param_groups[0]["fused"] is None
        assert "optimizer" not in rt.describe()["reasons"]


def test_fp16_scaler_skips_an_overflowing_step_with_fused_kernels():
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    use_fused_kernels(opt)
    precision = FP16Mixed("cpu", init_scale=1024.0)
    before = [p.detach().clone() for p in net.parameters()]
    loss = net(torch.randn(4, 8)).sum()
    precision.backward(loss)
    next(net.parameters()).grad[0, 0] = float("inf")
    precision.step(opt)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    assert precision.skipped_steps == 1 and precision.scaler.get_scale() == 512.0
    opt.zero_grad()
    precision.backward(net(torch.randn(4, 8)).sum())
    precision.step(opt)  # a finite step goes through
    assert not all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


def test_a_checkpoint_of_an_unfused_optimizer_resumes_unfused_under_fp16():
    # Saved before the switch existed (for-loop Adam): its groups win on load, and the scaler follows.
    old_net = model()
    old = torch.optim.Adam(old_net.parameters(), lr=1e-2)
    train(old_net, old, steps=2)
    with Runtime("cpu", "fp16-mixed", precision_options={"init_scale": 1.0}) as rt:
        net, opt = rt.setup(model(), lambda p: torch.optim.Adam(p, lr=1e-2))
        assert opt.param_groups[0]["fused"] is True and opt._step_supports_amp_scaling
        rt.strategy.load_optimizer_state_dict(net, opt, old.state_dict())
        assert opt.param_groups[0]["fused"] is None and not opt._step_supports_amp_scaling
        with rt.autocast():
            loss = net(torch.randn(4, 8)).sum()
        rt.backward(loss)
        rt.step(opt)  # the for-loop kernel, handed no scale by the GradScaler
        assert int(opt.state[next(net.parameters())]["step"]) == 3
