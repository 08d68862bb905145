"""A two-input Keras model on the TensorFlow engine, in each data form model.fit takes (a dict of arrays,
a tuple of arrays, a tf.data.Dataset of (dict, y) batches): it trains, a stopped run resumes bit for bit,
inspect describes both inputs, SavedModel and TFLite export with named inputs and parity, and infer
matches an .npz's arrays to them by name. One subprocess
(tf_two_inputs_scenario.py): TensorFlow's import costs seconds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]
FORMS = ("dict", "tuple", "dataset")


@pytest.fixture(scope="module")
def checks(tmp_path_factory, scenario) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return scenario(
        Path(__file__).with_name("tf_two_inputs_scenario.py"), tmp_path_factory.mktemp("two"), env=env
    )


@pytest.mark.parametrize("form", FORMS)
def test_trains_and_resumes_bit_for_bit(checks, form):
    got = checks[form]
    assert got["codes"] == [0, 0, 0]
    assert got["weights_equal"]
    straight, resumed = got["losses"]
    assert {s: v for s, v in straight.items() if int(s) > 7} == {
        s: v for s, v in resumed.items() if int(s) > 7
    }


def test_the_three_forms_train_the_same_model_on_the_same_samples(checks):
    assert (
        checks["dict"]["first_weights"]
        == checks["tuple"]["first_weights"]
        == checks["dataset"]["first_weights"]
    )


def test_a_batched_dataset_is_rebatched_only_with_a_line_that_says_so(checks):
    assert all(checks[form]["warnings"] == [] for form in FORMS)  # batch 16, as the dataset's
    code, (line,) = checks["rebatched"]  # --batch-size 32
    assert code == 0
    assert line.startswith("gpulab: warning: the recipe's training data comes in batches of 16")
    assert "32 a step" in line and "--batch-size 16" in line


@pytest.mark.parametrize("form", FORMS)
def test_inspect_describes_both_inputs(checks, form):
    code, report = checks[form]["inspect"]
    assert code == 0, report
    # the forward counted on both inputs (the model's call kept positional tensors only: "forward n/a")
    forward, step = checks[form]["inspect_flops"]
    assert forward and step and 0 < forward < step


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fmt", ["savedmodel", "tflite"])
def test_exports_with_named_inputs_parity_and_infer_by_name(checks, form, fmt):
    got = checks[form]["export"][fmt]
    assert got["code"] == 0, got.get("err")
    assert got["parity"]["passed"] is True and got["parity"]["samples"] == 32
    assert got["names"] == ["a", "b"]  # a dict's keys, or the keras.Input names of a tuple's model
    assert got["infer"] == [0, 0]
    # The .npz holds b before a: matched by name, its predictions are the eager model's.
    assert got["infer_error"] < 1e-5
    assert got["same_as_recipe_data"]
