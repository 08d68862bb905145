"""A user's DataLoader batches its own data: a batch_size set to another number is one warning line, and
what summary.json records is the batch the run really trained on."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.cli import main
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import GpulabWarning

RECIPE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from gpulab.core.recipes.base import Recipe

def build(options):
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 2, (64,), generator=g))
    return Recipe(model=nn.Linear(4, 2), train_data=DataLoader(data, batch_size=16),
                  loss_fn=nn.functional.cross_entropy, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
"""


def fit(**settings):
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = Trainer(device="cpu", max_steps=2, progress=False, tensorboard=False, mfu=False, **settings)
    return trainer.fit(nn.Linear(4, 2), DataLoader(data, batch_size=16), loss_fn=nn.functional.cross_entropy,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1))  # fmt: skip


def test_a_batch_size_the_loader_does_not_take_is_one_line_and_not_recorded():
    with pytest.warns(GpulabWarning) as caught:
        result = fit(batch_size=64)
    (line,) = [str(w.message) for w in caught if "DataLoader" in str(w.message)]
    assert line.startswith("batch_size 64 does not apply to the DataLoader given") and "\n" not in line
    assert "(16 a batch)" in line and "batch_size=64" in line
    assert result.batch_size == 16


def test_the_loaders_own_batch_size_needs_no_setting_and_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error", GpulabWarning)
        assert fit().batch_size == 16
        assert fit(batch_size=16).batch_size == 16


def test_gpulab_train_records_the_loaders_batch(tmp_path, monkeypatch):
    (tmp_path / "loader_recipe.py").write_text(RECIPE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = [
        "train",
        "loader_recipe:build",
        "--device",
        "cpu",
        "--max-steps",
        "2",
        "--set",
        "progress=false",
    ]
    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        assert main([*common, "--out", "plain"]) == 0
    assert not [w for w in plain if "does not apply" in str(w.message)]  # the recipe set no batch size
    with pytest.warns(GpulabWarning, match="batch_size 64 does not apply to the DataLoader given"):
        assert main([*common, "--out", "told", "--batch-size", "64"]) == 0
    for run in ("plain", "told"):
        summary = json.loads((tmp_path / run / "summary.json").read_text())
        assert summary["batch_size"] == 16
