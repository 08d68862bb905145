"""A Hugging Face T5 (a tiny config built here: no download) exported without ``decoder_input_ids``: its
forward makes them from ``labels``, which an export withholds, so its decoder gets no input. Every
format says so in the same one line, with what to pass (issue 39: onnx, torchscript and exported/aoti
each refused in their own words, pointing at one another); the line's advice exports it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpulab.cli import main

pytest.importorskip("transformers")

RECIPE = """
import torch
from transformers import T5Config, T5ForConditionalGeneration
from gpulab import Recipe

def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 64, (n, 12), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.flip(ids, [1])[:, :8]}

def build(options):
    config = T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
                      num_heads=2, decoder_start_token_id=0, pad_token_id=0)
    return Recipe(T5ForConditionalGeneration(config), data(32, 0), loss_fn=None, val_data=data(16, 1),
                  optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), defaults={"batch_size": 8})
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("t5")
    (root / "tiny_t5.py").write_text(RECIPE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.syspath_prepend(str(root))
        assert main(["train", "tiny_t5:build", "--out", "run", "--max-steps", "2", "--device", "cpu",
                     "--set", "progress=false"]) == 0  # fmt: skip
        yield root


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "exported"])
def test_every_format_says_the_decoder_gets_no_input_in_one_line(root, monkeypatch, capsys, fmt):
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    capsys.readouterr()
    assert main(["export", "run", "--format", fmt, "--recipe", "tiny_t5:build"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "gpulab: error: T5ForConditionalGeneration's decoder gets no input: its forward makes "
        "decoder_input_ids from labels, which an export withholds"
    )
    assert "--input FILE.npz holding input_ids, attention_mask and decoder_input_ids" in line
    assert "decoder_start_token_id 0" in line
    assert not (root / "run" / "export").exists() or not any((root / "run" / "export").iterdir())


def test_the_decoder_input_it_names_exports_with_parity(root, monkeypatch, capsys):
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    from tiny_t5 import build, data

    batch = data(16, 1)
    decoder = build({}).model._shift_right(batch["labels"])  # the target shifted right, start token first
    assert torch.equal(decoder[:, 0], torch.zeros(16, dtype=torch.long))
    arrays = {k: batch[k].numpy() for k in ("input_ids", "attention_mask")}
    np.savez(root / "x.npz", **arrays, decoder_input_ids=decoder.numpy())
    assert main(["export", "run", "--format", "onnx", "--recipe", "tiny_t5:build", "--input", "x.npz"]) == 0
