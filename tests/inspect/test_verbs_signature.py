"""Every verb calls a model as training does (runtime/signature.py): a dict-batch model whose
``forward(x, lengths)`` takes no ``labels`` is inspected, its FLOPs counted and its largest batch found by
tune without ``labels`` sent to it."""

from __future__ import annotations

from gpulab.cli import main

RECIPE = """
import torch
from torch import nn
from gpulab.core.recipes.base import Recipe

class MeanOfValid(nn.Module):
    \"\"\"Averages each row's first `lengths` steps: the labels are the loss's, never forward's.\"\"\"
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
    def forward(self, x, lengths):
        mask = (torch.arange(x.shape[1]) < lengths[:, None]).unsqueeze(-1)
        return self.fc((x * mask).sum(1) / lengths[:, None])

def build(options):
    g = torch.Generator().manual_seed(0)
    data = {"x": torch.randn(64, 5, 4, generator=g), "lengths": torch.randint(1, 6, (64,), generator=g),
            "labels": torch.randint(0, 3, (64,), generator=g)}
    return Recipe(model=MeanOfValid(), train_data=data, loss_fn=nn.functional.cross_entropy,
                  optimizer=lambda p: torch.optim.SGD(p, lr=0.1), defaults={"batch_size": 8})
"""


def recipe_here(tmp_path, monkeypatch) -> str:
    (tmp_path / "lengths_recipe.py").write_text(RECIPE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lengths_recipe:build"


def test_inspect_does_not_send_labels_to_a_forward_without_them(tmp_path, monkeypatch, capsys):
    assert main(["inspect", recipe_here(tmp_path, monkeypatch), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "8×5×4 f32, 8 i64" in out  # the model's row: x and lengths, no labels
    assert "predicted peak memory of a training step at batch 8 (SGD)" in out


def test_the_flop_count_calls_forward_with_its_own_arguments(tmp_path, monkeypatch):
    from gpulab.core.recipes.base import load_recipe
    from gpulab.engines.torch.measure.flops import training_step_flops

    recipe = load_recipe(recipe_here(tmp_path, monkeypatch), {})
    batch = {k: v[:8] for k, v in recipe.train_data.items()}
    count = training_step_flops(recipe.model, recipe.loss_fn, batch)
    linear = 2 * 8 * 4 * 3  # the Linear's multiply-adds at batch 8
    assert count.method == "fake tensors" and count.total == 2 * linear  # forward + its weight gradient


def test_tunes_batch_search_takes_dict_batches(tmp_path, monkeypatch):
    from gpulab.tune.trial import largest_batch

    found, why = largest_batch({"recipe": recipe_here(tmp_path, monkeypatch), "device": "cpu"}, {})
    assert why == "" and found is not None
    assert found["batch_size"] == found["cap"] == 64  # this tiny model fits the whole data set
    assert all(t["fits"] for t in found["search"]["trials"])
