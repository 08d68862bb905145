"""Dataclass samples collate like tuples (a pytree): field by field into the same class, through the
Trainer's own loader and inspect's example batch, where torch's default_collate raises a TypeError."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset

from gpulab.engines.torch.data import make_loader
from gpulab.engines.torch.data.collate import collate
from gpulab.engines.torch.runtime.memory_estimate import example_batch
from gpulab.engines.torch.train.trainer import Trainer


@dataclass
class Sample:
    features: torch.Tensor
    labels: torch.Tensor


class Samples(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return Sample(torch.full((3,), float(i)), torch.tensor(i % 2))


def test_dataclass_samples_become_one_dataclass_of_batched_fields():
    batch = collate([Samples()[i] for i in range(4)])
    assert isinstance(batch, Sample)
    assert batch.features.shape == (4, 3) and batch.labels.tolist() == [0, 1, 0, 1]
    nested = collate([{"sample": Samples()[i], "id": i} for i in range(2)])
    assert isinstance(nested["sample"], Sample) and nested["id"].tolist() == [0, 1]


def test_the_trainers_loader_and_inspects_example_batch_take_them():
    batches = list(make_loader(Samples(), batch_size=4, device="cpu", shuffle=False))
    assert [type(b) for b in batches] == [Sample] * 3 and batches[-1].features.shape == (2, 3)
    assert isinstance(example_batch(Samples(), 6), Sample)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, features):
        return self.fc(features)


def test_a_dataset_of_dataclasses_trains():
    trainer = Trainer(device="cpu", max_steps=3, batch_size=4, progress=False, tensorboard=False, mfu=False)
    result = trainer.fit(Net(), Samples(), loss_fn=nn.functional.cross_entropy,
                         optimizer=lambda p: torch.optim.SGD(p, lr=0.1))  # fmt: skip
    assert result.steps == 3
