"""The direct fused update (runtime/fused_step.py) is bit-identical to optimizer.step(), and declines where
step() must run."""

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.fused_step import direct_step


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def batches(steps):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(32, 8, generator=g) for _ in range(steps)]


def train(net, opt, step, steps=12):
    for x in batches(steps):
        net(x).pow(2).mean().backward()
        step(opt)
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


def stepped(opt):
    opt.step()


def direct_after_first(opt):
    if not direct_step(opt):
        assert not opt.state, "declined with state and no hook: it should have run"
        opt.step()


def assert_bit_identical(a, b):
    (params_a, state_a), (params_b, state_b) = a, b
    for x, y in zip(params_a, params_b, strict=True):
        assert torch.equal(x, y)
    for key in state_a["state"]:
        for name, value in state_a["state"][key].items():
            assert torch.equal(value, state_b["state"][key][name]), name
    assert state_a["param_groups"] == state_b["param_groups"]


@pytest.mark.parametrize(
    "build",
    [
        lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
        lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
        lambda p: torch.optim.Adam(p, lr=1e-2, fused=True, amsgrad=True, weight_decay=0.1),
        lambda p: torch.optim.Adam(p, lr=torch.tensor(1e-2), fused=True, maximize=True, betas=(0.8, 0.9)),
        lambda p: torch.optim.AdamW(
            [{"params": list(p)[:2], "lr": 3e-3}, {"params": list(p)[2:], "weight_decay": 0.0}], fused=True
        ),
        lambda p: torch.optim.Adam(
            [{"params": list(p)[:2], "amsgrad": True}, {"params": list(p)[2:]}], fused=True
        ),
    ],
    ids=["adam", "adamw", "amsgrad-wd", "tensor-lr-maximize", "two-groups", "amsgrad-in-one-group"],
)
def test_direct_step_is_bit_identical_to_step(build):
    net_a, net_b = model(), model()
    expected = train(net_a, build(net_a.parameters()), stepped)
    got = train(net_b, build(net_b.parameters()), direct_after_first)
    assert_bit_identical(expected, got)


def test_a_parameter_without_gradient_is_left_alone_as_step_does():
    net_a, net_b = model(), model()
    for net in (net_a, net_b):
        net[0].bias.requires_grad_(False)  # never gets a gradient
    build = lambda p: torch.optim.Adam(p, lr=1e-2, fused=True)  # noqa: E731
    assert_bit_identical(
        train(net_a, build(net_a.parameters()), stepped),
        train(net_b, build(net_b.parameters()), direct_after_first),
    )


@pytest.mark.parametrize(
    "build",
    [
        lambda p: torch.optim.Adam(p, lr=1e-2),  # for-loop kernels (fused unset)
        lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
        lambda p: torch.optim.SGD(p, lr=1e-2),
        lambda p: type("MyAdam", (torch.optim.Adam,), {})(p, fused=True),  # may override step
    ],
    ids=["for-loop", "foreach", "sgd", "subclass"],
)
def test_declines_what_it_does_not_run_exactly(build):
    net = model()
    opt = build(net.parameters())
    net(torch.randn(4, 8)).sum().backward()
    opt.step()  # state exists
    assert direct_step(opt) is False


def test_declines_before_the_first_step_and_with_hooks():
    net = model()
    opt = torch.optim.Adam(net.parameters(), fused=True)
    net(torch.randn(4, 8)).sum().backward()
    assert direct_step(opt) is False  # no state yet: step() creates it
    opt.step()
    calls = []
    handle = opt.register_step_post_hook(lambda *args: calls.append(1))
    assert direct_step(opt) is False
    handle.remove()
    handle = register_optimizer_step_pre_hook(lambda *args: None)
    assert direct_step(opt) is False
    handle.remove()
    assert direct_step(opt) is True


def test_runtime_step_uses_it_and_fp16_keeps_its_scaler():
    rt = Runtime("cpu", "fp32")
    net, opt = rt.setup(model(), lambda p: torch.optim.Adam(p, lr=1e-2))
    assert rt._plain_step and opt.param_groups[0]["fused"]
    net(torch.randn(4, 8)).sum().backward()
    rt.step(opt)  # the first step creates the state through step()
    opt.step = None  # from here on step() is not called
    net(torch.randn(4, 8)).sum().backward()
    rt.step(opt)
    assert opt.state[net[0].weight]["step"].item() == 2
    assert all(p.grad is None for p in net.parameters())  # zeroed as zero_grad(set_to_none=True) does
    with pytest.warns(Warning, match="fp16"):
        rt16 = Runtime("cpu", "fp16-mixed")
    assert not rt16._plain_step
