"""``gpulab inspect`` on a recipe of dict batches (model arguments by name, the model's own loss): the
table and a predicted peak, as for tuple batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulab.cli import main

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root


def test_inspect_prints_the_table_and_a_predicted_peak_for_the_hf_causal_lm(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT))
    args = ["inspect", "examples.hf_causal_lm:build", "--device", "cpu", "--batch-size", "4"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "lm_head" in out and "predicted peak memory of a training step at batch 4 (AdamW)" in out
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["predicted_peak_bytes"] > 0 and report["failure"] is None
