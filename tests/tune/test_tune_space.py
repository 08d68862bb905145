"""Which values a knob's trial tries: channels_last tries the other of what the config does on the device."""

from __future__ import annotations

import torch
from torch import nn

from gpulab.engines.torch.tune_space import channels_last_group

CONV = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU())


def test_channels_last_tries_the_other_of_what_the_config_does_on_this_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def tried(device, current):
        return [c.settings for c in channels_last_group(CONV, device, current).candidates]

    assert tried(cpu, "auto") == [{"channels_last": True}]  # auto is off on a CPU
    assert tried(cuda, "auto") == [{"channels_last": False}]  # ... and on for a conv net on CUDA
    assert tried(cuda, False) == [{"channels_last": True}]
    assert tried(cpu, True) == [{"channels_last": False}]
    none = channels_last_group(nn.Linear(4, 4), cpu, "auto")
    assert not none.candidates and none.reason == "the model has no Conv2d"
