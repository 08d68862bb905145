"""examples/hf_bert_classifier.py: a Hugging Face BERT trained from dict batches (its own loss, padded
sequences) exports to ONNX and an ExportedProgram as it was trained: inputs ``input_ids`` and
``attention_mask`` by name, a dynamic batch and sequence length, parity on the padded validation set, and
``gpulab infer`` on inputs of another batch and length equal to the eager model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gpulab.cli import main
from gpulab.core.recipes.trust import RecipeTrust
from gpulab.engines.torch.rebuild import rebuild

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root
RECIPE = "examples.hf_bert_classifier:build"
SUFFIX = {"onnx": ".onnx", "exported": ".pt2"}


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    import sys

    sys.path.insert(0, str(ROOT))
    out = tmp_path_factory.mktemp("bert") / "run"
    args = ["train", RECIPE, "--out", str(out), "--max-steps", "6", "--device", "cpu", "--precision", "fp32"]
    assert main([*args, "--set", "progress=false", "--set", "mfu=false", "--set", "tensorboard=false"]) == 0
    yield out
    sys.path.remove(str(ROOT))


def _padded_inputs(path: Path, batch: int, length: int) -> dict[str, np.ndarray]:
    from examples.hf_bert_classifier import sequences

    data = sequences(batch, seed=3)
    arrays = {k: data[k][:, :length].numpy() for k in ("input_ids", "attention_mask")}
    arrays["attention_mask"][:, length // 2 :] = 0  # half of each row is padding
    np.savez(path, **arrays, labels=data["labels"].numpy())
    return arrays


@pytest.mark.parametrize("fmt", ["onnx", "exported"])
def test_bert_exports_with_named_inputs_dynamic_batch_and_length_and_parity(bert_run, fmt, tmp_path, capsys):
    recipe = "examples.hf_bert_classifier:build"  # the user repeats the recipe the run names (trust rule)
    assert main(["export", str(bert_run), "--format", fmt, "--recipe", recipe]) == 0
    artifact = bert_run / "export" / f"examples.hf_bert_classifier-build{SUFFIX[fmt]}"  # no ':' in the name
    assert "inputs input_ids, attention_mask" in capsys.readouterr().out
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert report["passed"] and report["samples"] == 256  # the whole (padded) validation set
    assert report["max_abs_error"] <= 1e-5
    info = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
    assert [i["name"] for i in info["inputs"]] == ["input_ids", "attention_mask"]
    assert info["inputs"][0]["shape"] == ["batch", "sequence"] and info["sequence_dim"] == "dynamic"
    if fmt == "onnx":
        import onnx

        graph = onnx.load(str(artifact)).graph
        assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
        assert graph.output[0].name == "logits"

    arrays = _padded_inputs(tmp_path / "x.npz", batch=5, length=13)  # neither the example's batch nor length
    out = tmp_path / "pred.npz"
    assert main(["infer", str(artifact), "--input", str(tmp_path / "x.npz"), "--out", str(out)]) == 0
    model = rebuild(bert_run, RecipeTrust("examples.hf_bert_classifier:build")).model
    with torch.no_grad():
        eager = model(**{k: torch.from_numpy(v) for k, v in arrays.items()}).logits
    got = np.load(out)["output"]
    assert got.shape == (5, 3)
    assert np.abs(got - eager.numpy()).max() <= 1e-5
