"""A rank's RNG state is its own device's: it restores onto the device the resuming process uses, so a
single-GPU run saved on a big machine resumes on a smaller one. CUDA is faked (a CPU machine)."""

from __future__ import annotations

import pytest
import torch

from gpulab.engines.torch.state.rng import capture_rng, restore_rng, validate_rng
from gpulab.errors import CheckpointError


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda with ``gpus`` devices whose generator state is 16 bytes; records every set."""
    box = {"gpus": 8, "set": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: box["gpus"])
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda i=0: torch.full((16,), int(i), dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [torch.full((16,), i, dtype=torch.uint8)
                                                                  for i in range(box["gpus"])])  # fmt: skip
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, i=0: box["set"].append((int(i), int(s[0]))))
    return box


def test_a_rank_state_goes_onto_the_device_the_resuming_process_uses(fake_cuda):
    state = capture_rng(cuda_devices=[3])  # rank 3 of an 8-GPU machine, on cuda:3
    validate_rng(state)
    assert state["cuda_devices"] == [3] and len(state["cuda"]) == 1
    fake_cuda["gpus"] = 1  # resumed as a single-device run on a 1-GPU machine
    restore_rng(state, cuda_devices=[0])
    assert fake_cuda["set"] == [(0, 3)]  # cuda:3's stream, now on cuda:0


def test_an_every_device_state_from_a_bigger_machine_restores_the_own_device(fake_cuda):
    state = capture_rng()  # the old format: all 8 visible devices, by index
    fake_cuda["gpus"] = 1
    with pytest.raises(CheckpointError, match="8 CUDA device"):
        restore_rng(state)  # without knowing which device is ours it stays strict
    restore_rng(state, cuda_devices=[0])
    assert fake_cuda["set"] == [(0, 0)]


def test_a_per_process_state_for_another_device_count_is_refused_before_anything_is_set(fake_cuda):
    state = capture_rng(cuda_devices=[0, 1])
    with pytest.raises(CheckpointError, match="holds 2 device state"):
        restore_rng(state, cuda_devices=[0])
    assert fake_cuda["set"] == []
