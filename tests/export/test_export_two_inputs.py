"""A user's model of two inputs written from the README alone (an image and a table of features, a dict
output ``{"logits", "aux"}``), from tuple batches: exported with both inputs (positionally, named
``input0``/``input1``), parity on the validation set, and ``gpulab infer`` on an .npz of two arrays."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import torch

from gpulab.cli import main

RECIPE = """
import torch
from torch import nn
from torch.nn import functional as F
from gpulab import Recipe

class ImageAndTable(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.table = nn.Linear(5, 8)
        self.head = nn.Linear(16 + 8, 3)

    def forward(self, image, features):
        z = torch.cat([self.conv(image), self.table(features)], dim=1)
        return {"logits": self.head(z), "aux": z.pow(2).mean()}

def rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    image, features = torch.randn(n, 1, 6, 6, generator=g), torch.randn(n, 5, generator=g)
    return image, features, (features[:, 0] > 0).long() + (image.mean((1, 2, 3)) > 0).long()

def build(options):
    return Recipe(ImageAndTable(), rows(256, 0), loss_fn=lambda out, y: F.cross_entropy(out["logits"], y),
                  optimizer=lambda p: torch.optim.Adam(p, lr=1e-2), val_data=rows(64, 1))
"""


def test_a_two_input_model_with_a_dict_output_exports_and_infers(tmp_path, monkeypatch, capsys):
    (tmp_path / "two_input_recipe.py").write_text(textwrap.dedent(RECIPE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    args = ["--max-steps", "4", "--device", "cpu", "--set", "progress=false", "--set", "mfu=false"]
    assert main(["train", "two_input_recipe:build", "--out", str(run), *args]) == 0
    assert main(["export", str(run), "--format", "exported", "--recipe", "two_input_recipe:build"]) == 0
    artifact = run / "export" / "two_input_recipe-build.pt2"
    info = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
    assert [i["name"] for i in info["inputs"]] == ["input0", "input1"] and info["call"] == "positional"
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert report["passed"] and report["samples"] == 64 and report["max_abs_error"] <= 1e-5
    g = torch.Generator().manual_seed(9)
    image, features = torch.randn(3, 1, 6, 6, generator=g), torch.randn(3, 5, generator=g)
    np.savez(tmp_path / "x.npz", image=image.numpy(), features=features.numpy())
    out = tmp_path / "pred.npz"
    assert main(["infer", str(artifact), "--input", str(tmp_path / "x.npz"), "--out", str(out)]) == 0
    assert np.load(out)["output"].shape == (3, 3)
