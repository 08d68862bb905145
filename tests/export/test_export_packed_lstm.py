"""A packed-sequence LSTM (``pack_padded_sequence`` with a lengths tensor: data-dependent control flow):
ONNX, whose exporter is torch.export inside, refuses in one line naming the format that serves it;
TorchScript serves it, its sidecar calls the sequence length dynamic only as tested, and the artifact
agrees with the eager model at 3 lengths."""

from __future__ import annotations

import json

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
        self.emb, self.lstm, self.out = nn.Embedding(20, 8), nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 3)
    def forward(self, ids, lengths):
        packed = pack_padded_sequence(self.emb(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.out(h[-1])

def data(n=48, t=10):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    ids = torch.randint(1, 20, (n, t), generator=g) * (torch.arange(t) < lengths[:, None])
    return {"ids": ids, "lengths": lengths, "labels": torch.randint(0, 3, (n,), generator=g)}

def build(options):
    return Recipe(model=Packed(), train_data=data(), val_data=data(), loss_fn=nn.functional.cross_entropy,
                  optimizer=lambda p: torch.optim.Adam(p, 1e-2), defaults={"batch_size": 16})
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lstm")
    (root / "packed_lstm.py").write_text(RECIPE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.syspath_prepend(str(root))
        assert main(["train", "packed_lstm:build", "--out", "run", "--max-steps", "3", "--device", "cpu",
                     "--set", "progress=false"]) == 0  # fmt: skip
        yield root


def test_onnx_refuses_in_one_line_naming_the_format_that_serves_it(run, monkeypatch, capsys):
    monkeypatch.chdir(run)
    monkeypatch.syspath_prepend(str(run))
    capsys.readouterr()
    assert main(["export", "run", "--format", "onnx", "--recipe", "packed_lstm:build"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "gpulab: error: format onnx: the ONNX exporter (torch.export inside) cannot capture"
    )
    assert "--format torchscript" in line


def test_torchscript_serves_it_at_every_length_it_claims(run, monkeypatch):
    monkeypatch.chdir(run)
    monkeypatch.syspath_prepend(str(run))
    with pytest.warns(UserWarning, match="TorchScript is deprecated"):
        assert main(["export", "run", "--format", "torchscript", "--recipe", "packed_lstm:build"]) == 0
    artifact = run / "run" / "export" / "packed_lstm-build.torchscript.pt"
    info = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
    assert info["sequence_dim"] == "dynamic" and info["inputs"][0]["shape"] == ["batch", "sequence"]
    assert json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())["passed"] is True
    from packed_lstm import Packed, data

    from gpulab.core.recipes.base import load_recipe

    eager = load_recipe("packed_lstm:build", {}).model
    from gpulab.engines.torch.state.api import apply_model_state, read_verified_checkpoint

    apply_model_state(
        eager, read_verified_checkpoint(run / "run" / "checkpoints" / "step-00000003").model_state
    )
    served = torch.jit.load(str(artifact))
    assert isinstance(eager, Packed)
    for length in (3, 10, 16):  # shorter, the trained length, longer
        batch = data(8, length)
        with torch.no_grad():
            want = eager.eval()(batch["ids"], batch["lengths"])
            got = served(batch["ids"], batch["lengths"])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
