"""Keras models as users write them, on the TensorFlow engine through the CLI (issue 39): a subclassed
``keras.Model`` trains (it was ``not enough values to unpack`` at the step: no variables before its first
call), resumes bit for bit and exports; a two-output model trains with a dict (or list) of losses and
loss_weights as ``model.compile`` takes them, exports to SavedModel and TFLite with parity per output
(it was a traceback) and infers a prediction per output; a failed run is a TensorFlow run, or one line
saying it has no checkpoint (it was "trained with the torch engine"). One subprocess
(tf_keras_models_scenario.py): TensorFlow's import costs seconds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]
FORMATS = ("savedmodel", "tflite")


@pytest.fixture(scope="module")
def checks(tmp_path_factory, scenario) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return scenario(
        Path(__file__).with_name("tf_keras_models_scenario.py"), tmp_path_factory.mktemp("keras"), env=env
    )


def test_a_subclassed_model_trains_and_resumes_bit_for_bit(checks):
    got = checks["subclassed"]
    assert got["codes"] == [0, 0, 0]
    assert got["weights_equal"]
    straight, resumed = got["losses"]
    assert straight == resumed and len(straight) == 10


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_subclassed_model_exports_and_infers(checks, fmt):
    got = checks["subclassed"]["export"][fmt]
    assert got["code"] == 0, got.get("err")
    assert got["parity"]["passed"] is True and got["parity"]["samples"] == 32
    assert got["infer"] == [0, ""] and got["predicted"] == ["output", "top1"]
    assert got["infer_error"]["output"] < 1e-5
    # The one input is named in export.json as the exported signature names it (it had no name), and an
    # .npz holding it under that name infers.
    assert got["input_names"] == got["signature_inputs"] == ["input"]
    code, err, error = got["infer_by_name"]
    assert code == 0, err
    assert error < 1e-5


def test_a_run_that_failed_before_a_checkpoint_is_one_line_for_every_format(checks):
    got = checks["failed"]
    assert got["train"] == 2 and "summary.json" not in got["failed_files"]  # the loss became NaN
    for fmt in ("savedmodel", "onnx"):
        (line,) = got[fmt]
        assert line.startswith(
            "gpulab: error: failed: no summary.json and no checkpoint, so nothing to export"
        )
        assert "torch engine" not in line


def test_a_run_that_failed_after_a_checkpoint_is_a_tensorflow_run(checks):
    got = checks["failed"]
    assert got["late_train"] == 2 and "step-00000004" in got["late_checkpoints"]
    (line,) = got["late_savedmodel"]
    assert "no model.weights.h5 (the TensorFlow engine writes it when a run ends)" in line
    (line,) = got["late_onnx"]
    assert "late was trained with the tensorflow engine; valid for it: savedmodel|tflite" in line


def test_a_model_whose_call_fails_says_where_gpulab_called_it(checks):
    code, last = checks["failed"]["call_fails"]
    assert code == 1
    assert last == ["gpulab: the model's first call failed (one training sample through it, before the fit, "
                    "to create its variables and read its outputs)"]  # fmt: skip


@pytest.mark.parametrize("form", ["dict", "list", "summed"])
def test_two_outputs_train_with_a_dict_of_losses_and_loss_weights(checks, form):
    got = checks["two"][form]
    assert got["code"] == 0, got["err"]
    # a dict, a list and one summed loss_fn are the same loss: the same figures at every step
    assert got["losses"] == checks["two"]["dict"]["losses"] and len(got["losses"]) == 12
    # the validation loss is the one Keras computes with compile(loss=dict, loss_weights=dict)
    assert got["summary"]["val_loss"] == pytest.approx(checks["two"]["keras_val_loss"], rel=1e-6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_outputs_export_with_parity_per_output_and_infer_each(checks, fmt):
    got = checks["two"]["export"][fmt]
    assert got["code"] == 0, got.get("err")
    parity = got["parity"]
    assert parity["passed"] is True and set(parity["outputs"]) == {"cls", "reg"}
    assert all(report["passed"] for report in parity["outputs"].values())
    assert parity["outputs"]["cls"]["top1_agreement"] == 1.0  # the class output checked as a classifier
    assert got["outputs"] == ["cls", "reg"]
    assert got["infer"] == [0, ""]
    assert got["predicted"] == ["cls", "cls_top1", "reg"]  # no top-1 of a single regressed value
    assert max(got["infer_error"].values()) < 1e-5 and set(got["infer_error"]) == {"cls", "reg"}
    assert checks["two"]["summed_export"][fmt] == 0  # one summed loss_fn: exported too (was a traceback)


@pytest.mark.parametrize(
    ("mistake", "says"),
    [
        ("bad_key", "loss_fn names output(s) regression; the model's outputs are cls, reg"),
        ("weights_alone", "loss_weights weigh a dict of losses, one per output"),
    ],
)
def test_a_mistake_in_the_losses_is_one_line(checks, mistake, says):
    code, lines, tracebacks = checks["two"][mistake]
    assert code == 2 and tracebacks == 0
    (line,) = lines
    assert says in line
