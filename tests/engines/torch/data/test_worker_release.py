"""A fit ends its DataLoaders' persistent workers itself: left to Python's cyclic garbage collector, torch's
iterator waited 5 s per worker at whatever allocation the collector ran on (pytorch/pytorch#81794), so a run
with ``--set num_workers=2`` or a user's persistent DataLoader stalled 10 s after its summary."""

from __future__ import annotations

import gc
import multiprocessing

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.engines.torch.data.worker_release import release_workers
from gpulab.engines.torch.train.trainer import Trainer

SETTINGS = {"device": "cpu", "max_steps": 4, "batch_size": 8, "progress": False, "tensorboard": False,
            "mfu": False}  # fmt: skip


def data() -> TensorDataset:
    x = torch.randn(64, 3)
    return TensorDataset(x, (x[:, 0] > 0).long())


def fit(train, **settings) -> None:
    Trainer(**SETTINGS, **settings).fit(nn.Linear(3, 2), train, loss_fn=nn.functional.cross_entropy,
                                        optimizer=lambda p: torch.optim.SGD(p, lr=0.1))  # fmt: skip


@pytest.mark.parametrize("whose", ["the user's", "gpulab's"])
def test_no_persistent_worker_outlives_the_fit(whose):
    gc.collect()  # an earlier test's loaders, freed now, not counted below
    before = set(multiprocessing.active_children())
    loader = DataLoader(data(), batch_size=8, num_workers=2, persistent_workers=True)
    fit(loader if whose == "the user's" else data(), **({} if whose == "the user's" else {"num_workers": 2}))
    assert set(multiprocessing.active_children()) <= before  # the workers have exited: joined, not left
    assert loader._iterator is None  # the user's loader, iterated again, starts workers of its own
    assert len(list(loader)) == 8


def test_anything_without_a_persistent_loader_is_left_alone():
    loader = DataLoader(data(), batch_size=8)
    release_workers(type("Source", (), {"loader": loader})())
    release_workers(None)
    assert loader._iterator is None and len(list(loader)) == 8
