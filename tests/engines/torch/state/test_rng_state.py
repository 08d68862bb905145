"""RNG capture/restore: exact replay through a real save/load, and refusal of malformed state."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from gpulab.engines.torch.state.api import load_checkpoint, save_checkpoint
from gpulab.engines.torch.state.rng import capture_rng, restore_rng, validate_rng
from gpulab.errors import CheckpointError


def _draw() -> tuple:
    """Draws that touch every generator, cached Gaussians included."""
    return (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        float(np.random.standard_normal()),
        torch.rand(4).tolist(),
        torch.randn(2).tolist(),
    )


def test_round_trip_through_save_and_weights_only_load_replays_the_same_numbers(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    _draw()
    random.gauss(0, 1)  # leave a cached Gaussian in Python's generator
    np.random.standard_normal()  # and one in NumPy's (has_gauss = 1)
    state = capture_rng()
    expected = _draw()

    path = save_checkpoint(tmp_path, step=1, model_state={"w": torch.zeros(1)}, state={"rng": state}, meta={})
    _draw()  # move every generator on
    restore_rng(load_checkpoint(path).state["rng"])  # state.pt is read with weights_only=True
    assert _draw() == expected


def test_capture_uses_only_weights_only_types():
    state = capture_rng()
    assert state["python"]["state"].dtype == torch.int64 and state["python"]["state"].shape == (625,)
    assert state["numpy"]["keys"].dtype == torch.int64 and state["numpy"]["keys"].shape == (624,)
    assert state["torch"].dtype == torch.uint8
    assert isinstance(state["cuda"], list)


def _broken(mutate):
    state = capture_rng()
    mutate(state)
    return state


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("numpy"), "missing numpy"),
        (lambda s: s["python"].pop("gauss_next"), r"rng\.python: missing gauss_next"),
        (lambda s: s["python"].update(state=s["python"]["state"][:-1]), r"rng\.python\.state"),
        (lambda s: s["numpy"].update(keys=s["numpy"]["keys"].float()), r"rng\.numpy\.keys"),
        (lambda s: s["numpy"].update(pos=10_000), r"rng\.numpy\.pos"),
        (lambda s: s["numpy"].update(bit_generator="PCG64"), "not MT19937"),
        (lambda s: s.update(torch=s["torch"][:-1]), r"rng\.torch: has \d+ bytes"),
        (lambda s: s.update(torch=s["torch"].long()), r"rng\.torch: expected a 1-D uint8"),
        (lambda s: s.update(cuda=None), r"rng\.cuda: expected a list"),
        (lambda s: s.update(format=99), "not a known format"),
    ],
)
def test_malformed_state_raises_before_touching_any_generator(mutate, message):
    bad = _broken(mutate)
    random.seed(5)
    before = random.getstate()
    with pytest.raises(CheckpointError, match=message):
        restore_rng(bad)
    assert random.getstate() == before  # python would be restored first: it was not


def test_missing_rng_is_an_error_not_a_default():
    with pytest.raises(CheckpointError, match="expected a dict"):
        restore_rng(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_cuda_state_from_a_bigger_machine_needs_an_explicit_opt_out():
    state = capture_rng()
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)]
    with pytest.raises(CheckpointError, match="1 CUDA device"):
        restore_rng(state)
    expected = copy.deepcopy(state)
    validate_rng(state, strict_cuda=False)
    restore_rng(state, strict_cuda=False)  # restores Python/NumPy/torch CPU, skips the absent device
    assert torch.equal(torch.get_rng_state(), expected["torch"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_round_trip():
    state = capture_rng()
    expected = torch.rand(4, device="cuda")
    torch.rand(4, device="cuda")
    restore_rng(state)
    assert torch.equal(torch.rand(4, device="cuda"), expected)
