"""``gpulab export --format savedmodel|tflite`` for a TensorFlow-engine run, and ``gpulab infer`` on both:
the serving signature, parity against the eager Keras model, the refusals. TensorFlow runs in ONE
subprocess (tf_export_scenarios.py); the no-TensorFlow checks run here without importing it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gpulab.cli import main

SCENARIOS = Path(__file__).with_name("tf_export_scenarios.py")
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed"
)


@pytest.fixture(scope="module")
def checks(tmp_path_factory, scenario) -> dict:
    return scenario(SCENARIOS, tmp_path_factory.mktemp("tfexport"))


@needs_tf
@pytest.mark.parametrize("fmt", ["savedmodel", "tflite"])
def test_export_matches_the_eager_keras_model(checks, fmt):
    assert checks["train"] == 0
    result = checks[fmt]
    parity = result["parity"]
    assert result["code"] == 0 and parity["passed"] is True
    assert parity["samples"] == 360 and parity["reference"] == "eager Keras model"
    assert parity["accuracy_export"] == parity["accuracy_eager"] > 0.5
    assert parity["top1_agreement"] >= 0.999
    assert parity["max_abs_error"] <= 1e-4
    assert result["sidecar"]["engine"] == "tensorflow" and result["sidecar"]["batch_dim"] == "dynamic"


@needs_tf
@pytest.mark.parametrize("fmt", ["savedmodel", "tflite"])
def test_infer_on_the_artifact_predicts_what_parity_measured(checks, fmt):
    result = checks[fmt]
    assert result["infer"] == 0  # batches of 7: the dynamic batch dimension resized 52 times
    predicted, labels = result["predicted"], checks["labels"]
    accuracy = sum(p == t for p, t in zip(predicted, labels, strict=True)) / len(labels)
    assert accuracy == pytest.approx(result["parity"]["accuracy_export"])


@needs_tf
def test_serving_signature_has_a_dynamic_batch(checks):
    sig = checks["signature"]
    assert sig["input_name"] == ["input"] and sig["outputs"] == ["output"]
    assert sig["input_shape"] == [None, 8, 8, 1] and sig["input_dtype"] == "float32"
    assert sig["tflite_input_shape_signature"] == [-1, 8, 8, 1]
    fixed = checks["fixed"]
    assert fixed["code"] == 0 and fixed["parity"]["passed"] and fixed["parity"]["samples"] == 360


@needs_tf
def test_refusals_are_one_line_before_tensorflow_is_imported(checks):
    r = checks["refusals"]
    for case in ("tflite_from_torch", "no_weights", "bf16"):
        assert r[case]["code"] == 2 and r[case]["err"].count("\n") == 0, r[case]
    assert "format tflite needs a TensorFlow-engine run" in r["tflite_from_torch"]["err"]
    assert "no model.weights.h5" in r["no_weights"]["err"]
    assert (
        "--precision bf16: format savedmodel exports the float32 Keras model; valid: fp32" in r["bf16"]["err"]
    )
    assert r["tensorflow_imported"] is False
    onnx = checks["torch_format_from_tf_run"]
    assert onnx["code"] == 2 and "valid for it: savedmodel|tflite" in onnx["err"]


@needs_tf
def test_a_parity_failure_or_a_truncated_weights_file(checks):
    bad = checks["off_by_half"]
    assert bad["code"] == 1 and bad["passed"] is False
    assert "parity FAILED on 360 samples: max abs error 0.5" in bad["err"]
    cut = checks["truncated_weights"]  # refused by its manifest before Keras reads it
    assert cut["code"] == 2 and cut["err"].count("\n") == 0
    assert "model.weights.h5: size mismatch (model.weights.manifest.json says" in cut["err"]


@needs_tf
def test_weights_changed_in_place_are_refused_by_their_manifest(checks):
    """The trial's case: the first conv kernel's values changed, same size; it exported with "parity ok"."""
    bad = checks["tampered_weights"]
    assert bad["size_same"] and bad["code"] == 2 and bad["err"].count("\n") == 0, bad
    assert bad["err"].endswith(
        "model.weights.h5: checksum mismatch (sha256 differs from model.weights.manifest.json: the file was "
        "changed or corrupted)"
    )
    assert not bad["exported"]


@needs_tf
def test_a_tensorflow_run_naming_code_runs_nothing(checks):
    t = checks["trust"]
    assert t["marker"] is False
    for verb, source in (
        ("export", "payload/summary.json"),
        ("inspect", "meta.json"),
        ("infer", "digits.savedmodel.export.json"),
    ):
        assert t[verb]["code"] == 2 and t[verb]["err"].count("\n") == 0, (verb, t[verb])
        assert "names recipe 'logging.config:dictConfig' (imports module 'logging.config'" in t[verb]["err"]
        assert source in t[verb]["err"].split(" names recipe")[0], (verb, t[verb]["err"])
    # A resume takes the run's recorded settings (issue 21 item 8), so the payload's options reach the
    # recipe the user named first, and are refused as settings it does not have; the recipe is never read.
    resume = t["resume"]
    assert resume["code"] == 2 and "unknown setting 'options.version'" in resume["err"], resume


@needs_tf
def test_a_tensorflow_run_of_the_users_own_recipe_exports_when_the_user_says_so(checks):
    t = checks["trust"]
    assert t["own_refused"]["code"] == 2
    assert "names recipe 'my_tf_digits:build' (imports module 'my_tf_digits'" in t["own_refused"]["err"]
    assert t["own_repeated"]["code"] == 0 and t["own_trusted"]["code"] == 0


def test_tensorflow_absent_names_the_pip_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed: find_spec -> None
    (tmp_path / "summary.json").write_text(json.dumps({"recipe": "digits", "engine": "tensorflow"}))
    for fmt in ("savedmodel", "tflite"):
        code = main(["export", str(tmp_path), "--format", fmt])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0
        assert f"format {fmt} needs the Python package 'tensorflow'" in err
        assert "pip install 'gpulab[tensorflow]'" in err
