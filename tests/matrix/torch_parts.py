"""The torch side of a matrix cell, written as a user writes it: ``recipe(cell, options)`` builds the
Recipe of a cell's data, batch and model values (tests/matrix/setups.py). Each value is one entry below."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from gpulab.core.recipes.base import Recipe

SAMPLES, FEATURES, BATCH = 96, 6, 8
INPUTS = {"multi_input": ("a", "b")}  # forward's inputs; every other model takes x


def input_names(model: str) -> tuple[str, ...]:
    return INPUTS.get(model, ("x",))


@dataclass
class Batch:  # a user's batch type; the fields are forward's arguments and the labels
    x: torch.Tensor | None = None
    a: torch.Tensor | None = None
    b: torch.Tensor | None = None
    labels: torch.Tensor | None = None


def inputs(model: str, n: int, seed: int) -> dict[str, torch.Tensor]:
    """The model's inputs by name, and ``labels``: n samples."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    named = {"a": x[:, :4], "b": x[:, 4:]} if model == "multi_input" else {"x": x}
    return {**named, "labels": y}


def shaped(parts: dict[str, torch.Tensor], batch: str):
    """One sample or a whole set of ``parts`` as the cell's batch kind."""
    if batch == "tuple":
        return tuple(parts.values())  # (inputs..., target)
    if batch == "dict":
        return dict(parts)
    return Batch(**parts)


def collate(items):
    """A user's collate_fn for dataclass items (torch's default_collate takes tuples and dicts only)."""
    if isinstance(items[0], Batch):
        fields = [k for k, v in vars(items[0]).items() if v is not None]
        return Batch(**{k: torch.stack([getattr(i, k) for i in items]) for k in fields})
    return torch.utils.data.default_collate(items)


class Samples(Dataset):
    def __init__(self, parts: dict[str, torch.Tensor], batch: str) -> None:
        self.parts, self.batch = parts, batch

    def __len__(self) -> int:
        return len(self.parts["labels"])

    def __getitem__(self, i: int):
        return shaped({k: v[i] for k, v in self.parts.items()}, self.batch)


class Stream(IterableDataset):
    """Sharded over workers as the torch docs show: worker k takes every n-th sample."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, len(self.samples), step):
            yield self.samples[i]


def _loader(samples: Samples, **kw) -> DataLoader:
    return DataLoader(samples, batch_size=BATCH, collate_fn=collate, **kw)


DATA = {
    "tensors": lambda s: shaped(s.parts, s.batch),
    "numpy": lambda s: shaped({k: v.numpy() for k, v in s.parts.items()}, s.batch),
    "loader": lambda s: _loader(s, shuffle=True, generator=torch.Generator().manual_seed(0)),
    "loader_workers": lambda s: _loader(
        s,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=2,
        persistent_workers=True,
        pin_memory=True,
    ),  # fmt: skip
    "gpulab_workers": lambda s: s,  # gpulab's own loader; the lane passes --set num_workers=2
    "iterable": lambda s: DataLoader(Stream(s), batch_size=BATCH, num_workers=2, collate_fn=collate),
}


class Body(nn.Module):
    def __init__(self, pause: float, outputs: int = 2) -> None:
        super().__init__()
        self.pause = pause  # seconds a forward pass sleeps: a kill -9 lands mid-run
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, outputs))

    def run(self, x: torch.Tensor) -> torch.Tensor:
        if self.pause and self.training:
            time.sleep(self.pause)
        return self.net(x)


class Plain(Body):
    def forward(self, x):
        return self.run(x)


class OwnLoss(Body):  # Hugging Face style: a dict with logits, and the loss when labels are given
    def forward(self, x, labels=None):
        logits = self.run(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


class TwoInputs(Body):
    def forward(self, a, b):
        return self.run(torch.cat([a, b], dim=1))


class TwoOutputs(Body):
    def __init__(self, pause: float) -> None:
        super().__init__(pause, outputs=3)

    def forward(self, x):
        out = self.run(x)
        return out[:, :2], out[:, 2]  # class logits, a regression head


def two_output_loss(output, target):
    logits, score = output
    return F.cross_entropy(logits, target) + 0.1 * (score - target.float()).pow(2).mean()


MODELS = {  # model value: (module class, loss_fn)
    "loss_fn": (Plain, F.cross_entropy),
    "own_loss": (OwnLoss, None),
    "multi_input": (TwoInputs, F.cross_entropy),
    "multi_output": (TwoOutputs, two_output_loss),
}


def make_model(model: str, pause: float = 0.0) -> nn.Module:
    return MODELS[model][0](pause)


def recipe(cell: dict[str, str], options: dict) -> Recipe:
    model, batch = cell["model"], cell["batch"]
    samples = Samples(inputs(model, SAMPLES, seed=0), batch)
    torch.manual_seed(0)
    scheduler = None
    if cell["schedule"] == "user_scheduler":
        scheduler = lambda opt, total: torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)  # noqa: E731
    return Recipe(
        model=make_model(model, float(options.get("pause", 0))),
        train_data=DATA[cell["data"]](samples),
        val_data=shaped(inputs(model, 32, seed=1), batch),
        loss_fn=MODELS[model][1],
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2),
        scheduler=scheduler,
        defaults={"batch_size": BATCH, "tensorboard": False, "device": "cpu", "log_every": 2},
    )


def example(model: str, n: int) -> dict[str, np.ndarray]:
    """``n`` samples of the model's inputs as NumPy, by name (for infer's .npz and the reloads)."""
    return {k: v.numpy() for k, v in inputs(model, n, seed=2).items() if k != "labels"}


def prediction(output) -> torch.Tensor:
    """What export serves as predictions: the tensor, its logits, a tuple's first."""
    if isinstance(output, dict):
        return output["logits"]
    return output[0] if isinstance(output, tuple) else output
