"""FLOPs of a training step (exact for a Linear layer) and MFU against the peaks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.engines.torch.measure.flops import Peaks, count_flops, training_step_flops


@pytest.mark.parametrize(("batch", "d_in", "d_out"), [(16, 64, 32), (3, 7, 5)])
def test_linear_layer_flops_are_exact(batch, d_in, d_out):
    layer = nn.Linear(d_in, d_out)
    x = torch.randn(batch, d_in, requires_grad=True)  # so backward computes the input's gradient too
    counted = count_flops(lambda: layer(x).sum().backward())
    forward = 2 * batch * d_in * d_out
    assert counted.total == forward + 2 * forward  # backward: grad of the weight and of the input


def test_training_step_flops_traced_with_fake_tensors():
    layer = nn.Linear(64, 32)
    batch = (torch.randn(16, 64), torch.randn(16, 32))
    count = training_step_flops(layer, nn.functional.mse_loss, batch)
    # The data needs no gradient: forward 2*B*in*out, backward only the weight's gradient.
    assert count.total == 4 * 16 * 64 * 32 and count.method == "fake tensors"
    assert count.per_sample == 4 * 64 * 32 and count.batch_size == 16
    assert layer.weight.grad is None  # nothing ran for real


def test_step_flops_of_a_wrapped_model_with_dropout_leave_rng_and_buffers_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.3), nn.Linear(16, 4))
    batch = (torch.randn(10, 8), torch.randint(0, 4, (10,)))
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    rng = torch.get_rng_state()
    wrapped = nn.DataParallel(model)  # the user's module inside is traced
    # With one GPU visible, DataParallel moves the module onto it: the batch follows, as in training.
    device = next(wrapped.parameters()).device
    count = training_step_flops(wrapped, nn.functional.cross_entropy, tuple(t.to(device) for t in batch))
    assert count.total == 10 * (2 * 8 * 16 + 2 * 16 * 4) + 10 * (2 * 8 * 16 + 2 * 2 * 16 * 4)
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(buffers[k], v.cpu()) for k, v in model.named_buffers())


def test_mfu_against_both_peaks():
    peaks = Peaks("bf16", "NVIDIA H100 80GB HBM3", datasheet=1000.0, measured=500.0)
    assert peaks.mfu(250.0) == {"mfu": 0.25, "mfu_measured": 0.5}
    assert Peaks("fp32", "cpu", None, None).mfu(1.0) == {"mfu": None, "mfu_measured": None}
