"""Precision policies on CPU: each trains, bf16 really computes in bf16, the fp16 scaler skips overflows,
TF32 flags come back, and ``auto`` picks by device."""

from __future__ import annotations

import pytest
import torch

from gpulab import precisions as table
from gpulab.engines.torch.runtime.precision import PRECISIONS, FP16Mixed, resolve_precision
from gpulab.errors import ConfigError


def _problem(seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    torch.manual_seed(seed)
    return torch.nn.Linear(8, 1), x, y


def _train_step(precision, model, opt, x, y) -> float:
    with precision.autocast():
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    precision.backward(loss)
    precision.unscale(opt)
    precision.step(opt)
    opt.zero_grad(set_to_none=True)
    return loss.item()


def test_registry_matches_config_choices():
    assert {"auto", *PRECISIONS} == set(table.NAMES)  # config's choices (config.TableNames)


@pytest.mark.usefixtures("restore_tf32_flags")
@pytest.mark.parametrize("name", list(PRECISIONS))
def test_each_precision_trains_on_cpu(name):
    precision, reason = resolve_precision(name, "cpu")
    assert precision.name == name and reason == "requested"
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    precision.setup()
    try:
        losses = [_train_step(precision, model, opt, x, y) for _ in range(15)]
    finally:
        precision.teardown()
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay fp32


@pytest.mark.parametrize(("name", "dtype"), [("bf16-mixed", torch.bfloat16), ("fp16-mixed", torch.float16)])
def test_mixed_precision_computes_in_low_dtype(name, dtype):
    precision, _ = resolve_precision(name, "cpu")
    assert precision.compute_dtype == dtype
    model, x, _ = _problem()
    with precision.autocast():
        assert model(x).dtype == dtype
    assert model(x).dtype == torch.float32  # only inside autocast


@pytest.mark.parametrize("name", ["fp32", "tf32"])
def test_fp32_policies_do_not_autocast(name):
    precision, _ = resolve_precision(name, "cpu")
    model, x, _ = _problem()
    with precision.autocast():
        assert model(x).dtype == torch.float32
    assert precision.compute_dtype is None
    assert precision.state_dict() == {}


def _overflowing_step(precision: FP16Mixed, model, opt, x, y) -> None:
    with precision.autocast():
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    precision.backward(loss)
    model.weight.grad[0, 0] = float("inf")
    precision.step(opt)
    opt.zero_grad(set_to_none=True)


def test_fp16_skips_overflowing_step_and_backs_off():
    precision = FP16Mixed("cpu", init_scale=1024.0, growth_interval=3)
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]

    _overflowing_step(precision, model, opt, x, y)

    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert precision.scaler.get_scale() == 1024.0 * precision.scaler.get_backoff_factor()
    assert precision.skipped_steps == 1


def test_fp16_init_scale_and_growth_interval_are_honoured():
    precision = FP16Mixed("cpu", init_scale=256.0, growth_interval=3)
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scales = []
    for _ in range(3):
        _train_step(precision, model, opt, x, y)
        scales.append(precision.scaler.get_scale())
    # Unchanged for growth_interval - 1 clean steps, doubled on the growth_interval-th.
    assert scales == [256.0, 256.0, 512.0]
    assert precision.skipped_steps == 0


def test_fp16_state_dict_round_trip():
    precision = FP16Mixed("cpu", init_scale=64.0, growth_interval=5)
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    _overflowing_step(precision, model, opt, x, y)
    state = precision.state_dict()
    assert state["scale"] == 32.0 and state["growth_interval"] == 5

    fresh = FP16Mixed("cpu")
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_tf32_sets_flags_then_restores_them(restore_tf32_flags):
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    precision, _ = resolve_precision("tf32", "cpu")

    precision.setup()
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    precision.teardown()

    assert torch.get_float32_matmul_precision() == "highest"
    assert not torch.backends.cuda.matmul.allow_tf32
    assert not torch.backends.cudnn.allow_tf32


def test_auto_on_cpu_is_fp32_with_a_reason():
    precision, reason = resolve_precision("auto", torch.device("cpu"))
    assert precision.name == "fp32"
    assert "cpu" in reason and len(reason) > 10


def _fake_gpu(monkeypatch, capability: tuple[int, int]) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: capability >= (8, 0)
    )


# Building a CUDA GradScaler on a CPU-only machine warns that it disables itself; irrelevant here.
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("capability", "expected"),
    [((6, 1), "fp32"), ((7, 0), "fp16-mixed"), ((7, 5), "fp16-mixed"), ((8, 0), "bf16-mixed")],
)
def test_auto_on_cuda_depends_on_bf16_support(monkeypatch, capability, expected):
    _fake_gpu(monkeypatch, capability)
    precision, reason = resolve_precision("auto", torch.device("cuda:0"))
    assert precision.name == expected
    assert precision.device_type == "cuda"
    assert f"{capability[0]}.{capability[1]}" in reason


def test_auto_passes_scaler_options_through_or_ignores_them():
    precision, _ = resolve_precision("auto", "cpu", init_scale=8.0, growth_interval=10)
    assert precision.name == "fp32"
    fp16, _ = resolve_precision("fp16-mixed", "cpu", init_scale=8.0, growth_interval=10)
    assert fp16.scaler.get_growth_interval() == 10


def test_unknown_precision_lists_valid_choices():
    with pytest.raises(ConfigError) as info:
        resolve_precision("fp8", "cpu")
    message = str(info.value)
    assert "\n" not in message and "'fp8'" in message
    assert "auto|fp32|tf32|bf16-mixed|fp16-mixed" in message
