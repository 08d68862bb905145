"""A Keras recipe as a Keras user writes it (NumPy arrays, tf.data.Datasets or generators of batches)
trains, inspects, exports to SavedModel and TFLite with parity and runs through ``gpulab infer``, all on
the CLI (keras_numpy_scenario.py, in one subprocess: TensorFlow's import is paid once)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed"
)


@pytest.fixture(scope="module")
def checks(tmp_path_factory, scenario) -> dict:
    return scenario(Path(__file__).with_name("keras_numpy_scenario.py"), tmp_path_factory.mktemp("kn"))


@pytest.mark.parametrize(
    ("val", "fmt"),
    [("numpy", "savedmodel"), ("numpy", "tflite"), ("dataset", "savedmodel"), ("generator", "savedmodel")],
)
def test_a_keras_recipe_with_numpy_data_exports_with_parity(checks, val, fmt):
    got = checks[val]
    assert got["train"]["code"] == 0, got["train"]
    assert got[fmt]["export"]["code"] == 0, got[fmt]["export"]
    parity = got[fmt]["parity"]
    assert parity["passed"] and parity["samples"] == 128 and parity["max_abs_error"] <= 1e-4
    assert got[fmt]["infer"]["code"] == 0 and got[fmt]["rows"] == 128
    assert got["inspect"]["code"] == 0, got["inspect"]  # gpulab inspect --engine tensorflow
