"""channels_last: true|false|auto reaches the model and its 4-D inputs, and changes no mathematics."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime.memory_format import channels_last_batch, resolve_channels_last
from gpulab.engines.torch.train.trainer import Trainer

CL = torch.channels_last


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip


def images() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(64, 3, 12, 12, generator=g), torch.randint(0, 4, (64,), generator=g)


def test_auto_turns_it_on_only_for_conv_nets_on_cuda():
    conv, mlp = conv_net(), nn.Linear(4, 2)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU
    assert resolve_channels_last("auto", conv, cuda)[0] is True
    on, why = resolve_channels_last("auto", conv, cpu)
    assert on is False and "auto" in why and "channels_last: true" in why
    assert resolve_channels_last("auto", mlp, cuda) == (False, "off (auto: the model has no 2-D convolution)")
    assert (
        resolve_channels_last(True, mlp, cpu)[0] is True
        and resolve_channels_last(False, conv, cuda)[0] is False
    )


def test_only_4d_floating_tensors_are_converted():
    x, mask, ids = torch.randn(2, 3, 4, 5), torch.ones(2, 1, 4, 5, dtype=torch.bool), torch.zeros(2, 7).long()
    out = channels_last_batch({"pixels": x, "mask": mask, "ids": ids})
    assert out["pixels"].is_contiguous(memory_format=CL) and not x.is_contiguous(memory_format=CL)
    assert out["mask"] is mask and out["ids"] is ids


def fit(channels_last, capsys):  # progress=None: plain lines (no terminal); progress=False: silent
    model, seen = conv_net(), []
    model[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous(memory_format=CL)))
    x, y = images()
    result = Trainer(
        device="cpu", precision="fp32", max_steps=6, batch_size=16, log_every=1, progress=None, mfu=False,
        channels_last=channels_last,
    ).fit(model, (x, y), val_data=(x[:16], y[:16]), loss_fn=nn.CrossEntropyLoss(),
          optimizer=lambda params: torch.optim.SGD(params, lr=0.1))  # fmt: skip
    return model, seen, result, capsys.readouterr().out


def test_on_it_reaches_model_and_inputs_and_trains_as_off_does(capsys, one_thread):
    model_on, seen_on, on, printed_on = fit(True, capsys)
    model_off, seen_off, off, printed_off = fit("auto", capsys)  # auto on the CPU: off
    assert (
        model_on[0].weight.is_contiguous(memory_format=CL) and all(seen_on) and len(seen_on) == 8
    )  # 6 steps, 2 validations
    assert not model_off[0].weight.is_contiguous(memory_format=CL) and not any(seen_off)
    assert on.extras["channels_last"] == "on (as set)" and "channels_last: on (as set)" in printed_on
    assert off.extras["channels_last"].startswith("off (auto: a conv net on cpu")
    assert "channels_last: off (auto" in printed_off  # what auto chose, said at start-up
    assert [h["loss"] for h in on.history if "loss" in h] == pytest.approx(
        [h["loss"] for h in off.history if "loss" in h], rel=1e-5, abs=1e-6
    )
    torch.testing.assert_close(model_on.state_dict(), model_off.state_dict(), rtol=1e-4, atol=1e-5)
