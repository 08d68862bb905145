"""``gpulab inspect`` on a user's ``module:function``: the failing layer named in one line after the partial
table, nesting by --depth, the --json rows (the TensorFlow engine: test_inspect_tf.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpulab.cli import main

RECIPE = """
from collections import OrderedDict
import torch
from torch import nn
from gpulab.core.recipes.base import Recipe

def _recipe(head_in):
    model = nn.Sequential(OrderedDict(
        body=nn.Sequential(nn.Linear(4, 8), nn.ReLU()),
        head=nn.Linear(head_in, 2),
    ))
    x = torch.randn(32, 4)
    return Recipe(model=model, train_data=(x, torch.zeros(32, dtype=torch.long)),
                  loss_fn=nn.functional.cross_entropy, optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                  defaults={"batch_size": 5})

def good(options):
    return _recipe(8)

def wrong(options):  # the head expects 16 features; the body gives 8
    return _recipe(16)
"""


@pytest.fixture
def recipe_dir(tmp_path, monkeypatch):
    (tmp_path / "inspect_user_recipe.py").write_text(textwrap.dedent(RECIPE))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_layer_with_the_wrong_in_features_is_named_with_the_shape_it_got(recipe_dir):
    # A real process: torch logs a failed fake op's traceback to stderr, which must not reach the user.
    cmd = [sys.executable, "-m", "gpulab", "inspect", "inspect_user_recipe:wrong", "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=recipe_dir, timeout=120)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 2, err
    (line,) = err.splitlines()
    assert "layer 'head' (Linear) failed on its input 5×8 f32" in line
    assert "expected in_features=16 as the last dimension" in line
    # The partial table: the layers that ran, with their shapes, then the failing one marked.
    assert "5×4 f32" in out and "5×8 f32" in out and "FAILED here" in out
    assert "predicted peak memory" not in out  # no totals for a model that does not run


def test_depth_hides_nested_modules_and_json_gives_the_rows(recipe_dir, capsys):
    assert main(["inspect", "inspect_user_recipe:good", "--device", "cpu", "--depth", "1", "--json"]) == 0
    shallow = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["depth"]) for r in shallow["rows"]] == [("", 0), ("body", 1), ("head", 1)]
    assert main(["inspect", "inspect_user_recipe:good", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in report["rows"]]
    assert names == ["", "body", "body.0", "body.1", "head"]
    row = report["rows"][2]
    assert set(row) == {
        "name", "depth", "type", "inputs", "outputs", "params_trainable", "params_frozen",
        "flops_forward", "activation_bytes", "cast_dtype", "leaf", "status",
    }  # fmt: skip
    assert row["type"] == "Linear" and row["inputs"] == [{"shape": [5, 4], "dtype": "f32"}]
    assert row["outputs"] == [{"shape": [5, 8], "dtype": "f32"}]
    assert row["params_trainable"] == 4 * 8 + 8 and row["flops_forward"] == 2 * 5 * 4 * 8
    totals = report["totals"]
    assert totals["params_trainable"] == (4 * 8 + 8) + (8 * 2 + 2)
    assert totals["flops_per_sample"] * 5 == totals["flops_per_step"] > 0
    assert totals["predicted_peak_bytes"] > 0 and totals["fits"] is True
    assert report["failure"] is None and report["batch_size"] == 5


def test_the_table_and_totals_print(recipe_dir, capsys):
    assert main(["inspect", "inspect_user_recipe:good", "--device", "cpu", "--batch-size", "3"]) == 0
    out = capsys.readouterr().out
    assert "body" in out and "3×8 f32" in out and "FLOPs per sample" in out
    assert "predicted peak memory of a training step at batch 3 (SGD)" in out and "fits under" in out
