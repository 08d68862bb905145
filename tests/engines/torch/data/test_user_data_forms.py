"""Data in the forms the matrix lane's cells (tests/matrix) found refused or broken: NumPy arrays and a
dataclass of whole tensors as in-memory training data, a dataclass sample with an optional field left None,
a user's DataLoader (its own collate_fn) as inspect's example batch, and a dataclass as export's validation
data."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

from gpulab.artifact.data import named_from_recipe
from gpulab.engines.torch.data.collate import collate
from gpulab.engines.torch.data.loaders import make_loader
from gpulab.engines.torch.runtime.memory_estimate import example_batch
from gpulab.engines.torch.runtime.signature import Signature


@dataclass
class Batch:
    x: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    mask: torch.Tensor | None = None  # optional: left None


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x)


def rows(n: int = 10):
    x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    return x, torch.arange(n) % 2


def first(data, **kw):
    return next(iter(make_loader(data, batch_size=4, device="cpu", shuffle=False, **kw)))


def test_numpy_arrays_train_as_in_memory_tensors():
    x, y = rows()
    batch = first((x.numpy(), y.numpy()))
    assert isinstance(batch[0], torch.Tensor) and batch[0].equal(x[:4]) and batch[1].equal(y[:4])
    named = first({"x": x.numpy(), "labels": y.numpy()})
    assert named["x"].equal(x[:4])


def test_a_dataclass_of_whole_tensors_is_in_memory_data_with_its_set_fields():
    x, y = rows()
    batch = first(Batch(x=x, labels=y))
    assert set(batch) == {"x", "labels"} and batch["labels"].equal(y[:4])


def test_a_field_none_in_every_sample_stays_none():
    x, y = rows(2)
    batch = collate([Batch(x=x[0], labels=y[0]), Batch(x=x[1], labels=y[1])])
    assert batch.mask is None and batch.x.shape == (2, 3)


class Samples(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        x, y = rows()
        return Batch(x=x[i], labels=y[i])


def users_collate(items):
    return Batch(x=torch.stack([i.x for i in items]), labels=torch.stack([i.labels for i in items]))


def test_a_users_dataloader_gives_inspect_its_example_batch_through_its_collate_fn():
    batch = example_batch(DataLoader(Samples(), batch_size=4, collate_fn=users_collate), 6)
    assert isinstance(batch, Batch) and batch.x.shape == (6, 3)
    assert example_batch(rows(), 3)[0].shape == (3, 3)
    assert example_batch(tuple(t.numpy() for t in rows()), 3)[0].shape == (3, 3)  # arrays too


def test_a_dataclass_or_arrays_as_validation_data_check_an_export():
    x, y = rows()
    net = Net()
    named = named_from_recipe(Batch(x=x, labels=y), "r", Signature(net, None, None))
    assert named.names == ["x"] and named.inputs[0].equal(x) and named.target.equal(y)
    named = named_from_recipe(Samples(), "r", Signature(net, None, None))
    assert named.inputs[0].equal(x)
    named = named_from_recipe((x.numpy(), y.numpy()), "r", Signature(net, None, None))
    assert named.inputs[0].equal(x)
