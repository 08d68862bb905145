"""A float sequence ``[batch, time, features]`` (an LSTM over ``pack_padded_sequence``, no token ids):
TorchScript serves it at any length, and its export.json now says so (``sequence``) where the export ran
it at another length, so ``gpulab infer`` takes length 9 or 30 of a model trained at 16 (it was refused:
``input x float32 [batch, 16, 6] expected``, issue 39). A float input that fails at another length (a
model that flattens it) keeps its fixed size and is still refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gpulab.cli import main

RECIPE = """
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from gpulab.core.recipes.base import Recipe

class Packed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.out = nn.LSTM(6, 16, batch_first=True), nn.Linear(16, 3)
    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.out(h[-1])

class Flat(nn.Module):  # a [batch, 16, 6] input that is no sequence: its length is fixed
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(96, 3)
    def forward(self, x, lengths):
        return self.out(x.flatten(1)) + 0 * lengths[:, None]

def data(n=48, t=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    x = torch.randn(n, t, 6, generator=g) * (torch.arange(t) < lengths[:, None])[..., None]
    return {"x": x, "lengths": lengths, "labels": torch.randint(0, 3, (n,), generator=g)}

def build(options):
    model = Flat() if options.get("flat") else Packed()
    return Recipe(model=model, train_data=data(), val_data=data(seed=1), loss_fn=nn.functional.cross_entropy,
                  optimizer=lambda p: torch.optim.Adam(p, 1e-2), defaults={"batch_size": 16})
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("floatseq")
    (root / "float_lstm.py").write_text(RECIPE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.syspath_prepend(str(root))
        for run, extra in (("run", []), ("flat", ["--set", "options.flat=true"])):
            assert main(["train", "float_lstm:build", "--out", run, "--max-steps", "3", "--device", "cpu",
                         "--set", "progress=false", *extra]) == 0  # fmt: skip
            with pytest.warns(UserWarning, match="TorchScript is deprecated"):
                assert main(["export", run, "--format", "torchscript", "--recipe", "float_lstm:build"]) == 0
        yield root


def _artifact(root, run):
    artifact = root / run / "export" / "float_lstm-build.torchscript.pt"
    return artifact, json.loads(artifact.with_name(artifact.name + ".export.json").read_text())


def test_the_export_calls_the_float_sequence_dynamic_as_it_ran_it(root):
    _, info = _artifact(root, "run")
    assert info["sequence_dim"] == "dynamic" and info["sequence_checked"] == [16, 24]
    shapes = {i["name"]: i["shape"] for i in info["inputs"]}
    assert shapes == {"x": ["batch", "sequence", 6], "lengths": ["batch"]}


@pytest.mark.parametrize("length", [9, 30])
def test_infer_takes_another_length_and_matches_the_model(root, monkeypatch, capsys, length):
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    from float_lstm import data

    artifact, _ = _artifact(root, "run")
    batch = data(6, length, seed=2)
    np.savez(root / "x.npz", x=batch["x"].numpy(), lengths=batch["lengths"].numpy())
    assert main(["infer", str(artifact), "--input", str(root / "x.npz"), "--out", str(root / "p.npz")]) == 0
    from gpulab.core.recipes.base import load_recipe
    from gpulab.engines.torch.state.api import apply_model_state, read_verified_checkpoint

    eager = load_recipe("float_lstm:build", {}).model
    apply_model_state(
        eager, read_verified_checkpoint(root / "run" / "checkpoints" / "step-00000003").model_state
    )
    with torch.no_grad():
        want = eager.eval()(batch["x"], batch["lengths"]).numpy()
    got = np.load(root / "p.npz")["output"]
    assert got.shape == (6, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_float_input_of_fixed_length_stays_fixed_and_is_refused_in_one_line(root, monkeypatch, capsys):
    monkeypatch.chdir(root)
    artifact, info = _artifact(root, "flat")
    assert "sequence_dim" not in info and info["inputs"][0]["shape"] == ["batch", 16, 6]
    np.savez(root / "y.npz", x=np.zeros((6, 9, 6), "float32"), lengths=np.full(6, 9))
    capsys.readouterr()
    assert main(["infer", str(artifact), "--input", str(root / "y.npz")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "input 'x': float32 [batch, 16, 6] expected, float32 [6, 9, 6] given" in line


def test_an_array_named_as_no_input_of_a_model_that_names_them_is_refused_with_the_names(root, capsys):
    # the model names its inputs (forward(x, lengths) fed by keyword): arrays a, b were fed in file order
    artifact, info = _artifact(root, "flat")
    assert info["call"] == "keywords"
    np.savez(root / "ab.npz", a=np.zeros((6, 16, 6), "float32"), b=np.full(6, 16))
    capsys.readouterr()
    assert main(["infer", str(artifact), "--input", str(root / "ab.npz")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        "ab.npz: arrays ['a', 'b']; the model's inputs are ['x', 'lengths']: name one array after each "
        "(np.savez(FILE, **{name: array}))"
    ), line
