"""A conv net that records, on every forward, whether its input and its weights were channels_last and how
often its block ran (a checkpointed block runs again in backward); its optimizer records ``fused``."""

import torch
from torch import nn

from gpulab.core.recipes.base import Recipe

SEEN: dict[str, list] = {"input_nhwc": [], "weight_nhwc": [], "block_calls": [0], "fused": []}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        SEEN["block_calls"][0] += 1
        return torch.relu(self.conv(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = Block(), nn.Linear(4 * 8 * 8, 2)

    def forward(self, x):
        SEEN["input_nhwc"].append(x.is_contiguous(memory_format=torch.channels_last))
        SEEN["weight_nhwc"].append(self.block.conv.weight.is_contiguous(memory_format=torch.channels_last))
        return self.head(self.block(x).flatten(1))


def _adam(params):
    opt = torch.optim.Adam(params, lr=1e-3)
    SEEN["fused"].append(opt)
    return opt


def build(options):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g)
    return Recipe(model=Net(), train_data=(x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=_adam,
                  defaults={"batch_size": 8, "device": "cpu"})  # fmt: skip
