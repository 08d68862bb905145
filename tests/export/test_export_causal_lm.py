"""A causal LM's export parity and infer read accuracy as its training does: the logits at position t
against the label at t+1 (``runtime/step_call.shifts_labels``), not the echo an unshifted reading scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gpulab.cli import main

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root
RECIPE = "examples.hf_causal_lm:build"
SMALL = ["--set", "options.n_layer=1", "--set", "options.n_embd=32", "--set", "options.resid_pdrop=0.0"]


@pytest.mark.slow
def test_parity_and_infer_score_the_next_token(tmp_path, monkeypatch, capsys, one_thread):
    monkeypatch.syspath_prepend(str(ROOT))
    run = tmp_path / "run"
    assert main(["train", RECIPE, "--out", str(run), "--max-steps", "2", "--batch-size", "8", *SMALL]) == 0
    assert main(["export", str(run), "--format", "exported", "--recipe", RECIPE]) == 0
    artifact = run / "export" / "examples.hf_causal_lm-build.pt2"
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert (
        json.loads(artifact.with_name(artifact.name + ".export.json").read_text())["labels_shifted"] is True
    )
    # The same figure by hand: the exported program's logits at t against the token at t+1.
    from gpulab.core.recipes.base import load_recipe

    ids = load_recipe(RECIPE, {"n_layer": 1, "n_embd": 32}).val_data["input_ids"]
    logits = torch.export.load(str(artifact)).module()(ids).float()
    by_hand = (logits[:, :-1].argmax(-1) == ids[:, 1:]).double().mean().item()
    assert report["accuracy_shifted"] is True
    assert report["accuracy_export"] == pytest.approx(by_hand, abs=1e-9)
    echo = (logits.argmax(-1) == ids).double().mean().item()
    assert report["accuracy_export"] != pytest.approx(echo, abs=1e-3)  # not the unshifted reading
    capsys.readouterr()
    out = tmp_path / "p.npz"
    assert main(["infer", str(artifact), "--recipe-data", "--recipe", RECIPE, "--out", str(out)]) == 0
    assert f"accuracy {report['accuracy_export']:.2%}" in capsys.readouterr().out
    assert np.load(out)["output"].shape == tuple(logits.shape)
