"""Validation runs after the epoch's checkpoint: a validation that fails (the user's metric, a model whose
eval path differs) names itself and leaves the epoch's training in a checkpoint that resumes exactly, and
``keep_best`` still keeps the best checkpoint although its metric is known only after the save."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from gpulab.cli import main
from gpulab.core.callbacks import Callback
from gpulab.engines.torch.state.api import list_checkpoints
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ValidationFailed

FEATURES = 8


class Net(nn.Module):
    """Dropout in training; ``broken_eval`` makes every forward in eval mode raise (an eval path that
    differs from the training one)."""

    def __init__(self, broken_eval: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
        self.broken_eval = broken_eval

    def forward(self, x):
        if not self.training:
            if self.broken_eval:
                raise ValueError("eval path: shapes (32, 8) and (16, 4) do not match")
            # An eval path that draws random numbers (a sampled metric, test-time noise): the training's
            # streams must not notice, or a run resumed from the checkpoint before it would differ.
            random.random(), np.random.rand(), torch.rand(1)
        return self.body(x)


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


def _fit(out, model: Net, *, resume=None, callbacks=(), **settings):
    trainer = Trainer(
        device="cpu", batch_size=16, epochs=3, seed=3, out_dir=str(out), progress=False, tensorboard=False,
        mfu=False, callbacks=list(callbacks), **settings,
    )  # fmt: skip
    result = trainer.fit(model, _data(64, 0), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.AdamW(p, 1e-2),
                         val_data=_data(32, 1), resume=resume)  # fmt: skip
    return trainer, result


def test_a_failing_validation_names_itself_and_its_checkpoint_resumes_exactly(tmp_path):
    _, straight = _fit(tmp_path / "straight", Net())

    root = tmp_path / "run" / "checkpoints"
    with pytest.raises(ValidationFailed) as caught:
        _fit(tmp_path / "run", Net(broken_eval=True))
    assert str(caught.value) == (
        "validation failed at step 4 (epoch 0): ValueError: eval path: shapes (32, 8) and (16, 4) do not "
        f"match; checkpoint {root / 'step-00000004'} holds the training up to it: fix the validation, then "
        "continue with --resume latest"
    )
    assert isinstance(caught.value.__cause__, ValueError)  # the user's own traceback is kept
    assert [p.name for p in list_checkpoints(root)] == ["step-00000004"]
    assert (root / "latest").read_text().strip() == "step-00000004"

    fixed = Net()
    _, resumed = _fit(tmp_path / "run", fixed, resume="latest")
    assert resumed.steps == straight.steps == 12
    assert resumed.extras["resumed_from"] == str(root / "step-00000004")
    # The resumed run equals the one whose validation never failed, bit for bit: the save came first,
    # and validation drew nothing from the training's random streams (dropout, shuffling).
    assert resumed.final_loss == straight.final_loss
    straight_weights = Net()
    _fit(tmp_path / "again", straight_weights)
    for (name, a), b in zip(fixed.state_dict().items(), straight_weights.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert resumed.val_loss == straight.val_loss


def test_keep_best_marks_the_best_after_its_validation_and_pruning_keeps_it(tmp_path):
    scripted = [0.5, 0.1, 0.9, 0.4]  # val_loss per epoch: epoch 1 (step 8) is the best
    done = []

    class Count(Callback):
        def on_validation_end(self, trainer, state, metrics):
            done.append(metrics["val_loss"])

    model = Net()

    def loss_fn(out, y):
        return F.mse_loss(out, y) if model.training else torch.tensor(scripted[len(done)])

    trainer = Trainer(
        device="cpu", batch_size=16, epochs=4, out_dir=str(tmp_path), progress=False, tensorboard=False,
        mfu=False, keep_last=1, keep_best="val_loss:min", callbacks=[Count()],
    )  # fmt: skip
    trainer.fit(model, _data(64, 0), loss_fn=loss_fn, optimizer=lambda p: torch.optim.SGD(p, 0.01),
                val_data=_data(32, 1))  # fmt: skip
    root = tmp_path / "checkpoints"
    assert done == pytest.approx(scripted)
    assert [p.name for p in list_checkpoints(root)] == ["step-00000008", "step-00000016"]
    best = json.loads((root / "best.json").read_text())
    assert best == {
        "checkpoint": "step-00000008",
        "metric": "val_loss",
        "mode": "min",
        "value": pytest.approx(0.1),
    }
    # A checkpoint's meta.json holds no validation figure: at its save, the only one known was older.
    assert "val_loss" not in json.loads((root / "step-00000016" / "meta.json").read_text())["metrics"]


def test_the_cli_prints_the_users_traceback_then_one_gpulab_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_eval_recipe.py").write_text(
        "from gpulab.engines.torch.recipes import mlp\n\n\n"
        "def build(options=None):\n"
        "    recipe = mlp.build(options)\n"
        "    forward = recipe.model.forward\n\n"
        "    def checked(x):\n"
        "        if not recipe.model.training:\n"
        "            raise KeyError('my_metric')\n"
        "        return forward(x)\n\n"
        "    recipe.model.forward = checked\n"
        "    return recipe\n"
    )
    monkeypatch.chdir(tmp_path)
    code = main(["train", "broken_eval_recipe:build", "--out", "run", "--epochs", "1", "--device", "cpu",
                 "--set", "mfu=false", "--set", "tensorboard=false", "--set", "progress=false"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[0] == "Traceback (most recent call last):" and "KeyError: 'my_metric'" in err
    assert err[-1].startswith("gpulab: error: validation failed at step ")
    assert "KeyError: 'my_metric'; checkpoint " in err[-1] and "continue with --resume latest" in err[-1]
    assert (tmp_path / "run" / "checkpoints" / "latest").is_file()
