"""Runtime on CPU: setup, the training-step calls, batches moved to the device, rank-zero printing."""

from __future__ import annotations

import os
import random
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
import torch

import gpulab.engines.torch.runtime.runtime as runtime_module
from gpulab.engines.torch.data.transfer import to_device as move_to_device
from gpulab.engines.torch.runtime import Runtime, Single, seed_everything
from gpulab.engines.torch.runtime.precision import FP16Mixed
from gpulab.errors import ConfigError, DeviceError
from gpulab.hardware.devices import DeviceChoice


@pytest.fixture
def meta_runtime(monkeypatch):
    """A Runtime on the "meta" device: moving there is visible on a CPU-only machine."""
    monkeypatch.setattr(runtime_module, "select_device", lambda spec: DeviceChoice("meta", "test"))
    return Runtime("meta", precision="fp32")


def _model_and_data():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    return torch.nn.Linear(4, 1), x, x.sum(dim=1, keepdim=True)


def _backward(rt, model, x, y):
    with rt.autocast():
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    rt.backward(loss * 100)  # large gradients, so clipping has something to do
    return loss


def test_defaults_resolve_on_this_machine():
    rt = Runtime(device="cpu")
    assert rt.device == torch.device("cpu")
    assert rt.precision.name == "fp32" and isinstance(rt.strategy, Single)
    assert (rt.rank, rt.local_rank, rt.world_size, rt.is_rank_zero) == (0, 0, 1, True)
    info = rt.describe()
    assert info["device"] == "cpu" and info["precision"] == "fp32" and info["strategy"] == "single"
    assert set(info["reasons"]) == {"device", "precision", "strategy", "attention"}
    assert all(info["reasons"].values())


def test_auto_device_goes_through_select_device(monkeypatch):
    seen = []

    def fake(spec):
        seen.append(spec)
        return DeviceChoice("cpu", "fake reason")

    monkeypatch.setattr(runtime_module, "select_device", fake)
    rt = Runtime()
    assert seen == ["auto"] and rt.describe()["reasons"]["device"] == "fake reason"


def test_missing_device_raises_device_error(monkeypatch):
    def missing(spec):
        raise DeviceError(f"device {spec!r} requested but this machine has none")

    monkeypatch.setattr(runtime_module, "select_device", missing)
    with pytest.raises(DeviceError):
        Runtime("cuda:3")


def test_unknown_strategy_lists_valid_choices():
    with pytest.raises(ConfigError, match=r"valid choices: auto\|single"):
        Runtime("cpu", strategy="horovod")


def test_setup_builds_optimizer_from_factory_after_moving(meta_runtime):
    model, opt = meta_runtime.setup(torch.nn.Linear(4, 2), lambda ps: torch.optim.SGD(ps, lr=0.1))
    params = opt.param_groups[0]["params"]
    assert [p.device.type for p in params] == ["meta", "meta"]
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))


def test_setup_accepts_an_optimizer_instance_or_none():
    rt = Runtime("cpu", precision="fp32")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert rt.setup(model, opt) == (model, opt)
    assert rt.setup(model) == (model, None)


@pytest.mark.parametrize("precision", ["fp32", "fp16-mixed"])
def test_clip_grad_norm_really_clips(precision):
    # A small initial loss scale, so these large fp16 gradients do not overflow on the first step.
    rt = Runtime("cpu", precision=precision, precision_options={"init_scale": 16.0})
    model, x, y = _model_and_data()
    model, opt = rt.setup(model, lambda ps: torch.optim.SGD(ps, lr=0.01))
    _backward(rt, model, x, y)

    norm = rt.clip_grad_norm(model, opt, max_norm=0.5)

    # The norm before clipping, of the true gradients: fp16's loss scale (16x) must not show in it.
    ref_model, x, y = _model_and_data()
    torch.nn.functional.mse_loss(ref_model(x), y).mul(100).backward()
    reference = torch.nn.utils.clip_grad_norm_(ref_model.parameters(), float("inf"))
    assert isinstance(norm, torch.Tensor) and norm > 0.5
    assert norm == pytest.approx(reference.item(), rel=0.02)
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert after <= 0.5 + 1e-4
    rt.step(opt)  # fp16: stepping after an unscale must still work


def test_step_updates_params_zeroes_grads_and_steps_scheduler():
    rt = Runtime("cpu", precision="fp32")
    model, x, y = _model_and_data()
    model, opt = rt.setup(model, lambda ps: torch.optim.SGD(ps, lr=0.1))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    before = model.weight.detach().clone()
    _backward(rt, model, x, y)

    rt.step(opt, sched)

    assert not torch.equal(before, model.weight)
    assert all(p.grad is None for p in model.parameters())
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16-mixed", "fp16-mixed"])
def test_training_loop_reduces_loss(precision):
    with Runtime("cpu", precision=precision, precision_options={"init_scale": 1024.0}) as rt:
        model, x, y = _model_and_data()
        model, opt = rt.setup(model, lambda ps: torch.optim.SGD(ps, lr=0.05))
        losses = []
        for _ in range(15):
            xb, yb = rt.to_device((x, y))
            with rt.no_sync(model, enabled=False), rt.autocast():
                loss = torch.nn.functional.mse_loss(model(xb).float(), yb)
            rt.backward(loss)
            rt.clip_grad_norm(model, opt, 10.0)
            rt.step(opt)
            losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_precision_options_reach_the_fp16_scaler():
    rt = Runtime("cpu", precision="fp16-mixed", precision_options={"init_scale": 8.0, "growth_interval": 7})
    assert isinstance(rt.precision, FP16Mixed)
    assert rt.precision.scaler.get_growth_interval() == 7


def test_tf32_runtime_restores_flags_on_exit():
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        with Runtime("cpu", precision="tf32"):
            assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(saved)


def test_to_device_moves_nested_structures(meta_runtime):
    Pair = namedtuple("Pair", "a b")
    batch = {
        "x": (torch.ones(2), [torch.zeros(3), {"y": torch.arange(4)}]),
        "pair": Pair(torch.ones(1), 7),
        "ordered": OrderedDict(z=torch.ones(1)),
        "label": "cat",
    }
    moved = meta_runtime.to_device(batch)

    assert moved["x"][0].device.type == "meta" and isinstance(moved["x"], tuple)
    assert moved["x"][1][0].device.type == "meta" and isinstance(moved["x"][1], list)
    assert moved["x"][1][1]["y"].device.type == "meta" and moved["x"][1][1]["y"].dtype == torch.int64
    assert isinstance(moved["pair"], Pair) and moved["pair"].a.device.type == "meta"
    assert moved["pair"].b == 7 and moved["label"] == "cat"
    assert isinstance(moved["ordered"], OrderedDict) and moved["ordered"]["z"].device.type == "meta"
    assert batch["x"][0].device.type == "cpu"  # the input is left alone


def test_move_to_device_keeps_tensors_already_there():
    t = torch.ones(2)
    assert move_to_device([t], "cpu")[0] is t


def test_print_only_on_rank_zero(capsys, monkeypatch):
    rt = Runtime("cpu", precision="fp32")
    rt.print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"

    monkeypatch.setattr(Single, "rank", property(lambda self: 1))
    assert not rt.is_rank_zero
    rt.print("from rank one")
    assert capsys.readouterr().out == ""


def test_single_collectives_are_identities():
    rt = Runtime("cpu", precision="fp32")
    t = torch.tensor([1.0, 3.0])
    assert rt.all_reduce(t) is t and rt.all_reduce(t, op="sum") is t
    rt.barrier()
    assert rt.strategy.broadcast({"a": 1}) == {"a": 1}
    assert rt.all_reduce(t, op="max") is t and rt.reduce_flag(True) and not rt.reduce_flag(False)
    with pytest.raises(ValueError, match=r"mean\|sum\|max\|min"):
        rt.all_reduce(t, op="prod")


def test_a_ready_made_strategy_and_precision_are_used_as_given():
    strategy = Single("cpu")
    precision = FP16Mixed("cpu", init_scale=2.0)
    rt = Runtime("cpu", precision=precision, strategy=strategy)
    assert rt.strategy is strategy and rt.precision is precision
    assert rt.describe()["reasons"]["precision"].startswith("given")  # plus a note where it runs slowly


@pytest.fixture
def restore_determinism():
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(1).item()


@pytest.mark.usefixtures("restore_determinism")
def test_seed_everything_repeats_draws_and_sets_determinism(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert Runtime.seed_everything(123) == 123
    first = _draws()
    seed_everything(123, deterministic=True)
    assert _draws() == first
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_a_model_that_does_not_fit_its_device_is_one_line(monkeypatch):
    # On an H100 (2026-11-23) `--set memory_limit=1000000` made model.to("cuda") raise a CUDA
    # out-of-memory error with a 60-line traceback. Faked here: the move raises what CUDA would.
    from gpulab.errors import DeviceMemoryError

    rt = Runtime("cpu", precision="fp32", strategy="single")

    def no_room(model):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB.")

    monkeypatch.setattr(rt.strategy, "setup_module", no_room)
    with pytest.raises(
        DeviceMemoryError, match=r"parameters and buffers \(0\.0 MiB\) do not fit on cpu"
    ) as err:
        rt.setup(torch.nn.Linear(4, 2))
    assert "\n" not in str(err.value)
