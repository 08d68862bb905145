"""``gpulab inspect --engine tensorflow``: the digits table with Keras's own parameter count, the --json
rows and totals, the dtype-policy flag under bf16-mixed, a wrong-shape Keras model named in one line, and
a torch recipe refused (engine set in the config file). ONE subprocess runs every CLI call (TensorFlow's import costs seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys
    import keras
    from gpulab.cli import main
    from gpulab.engines.tensorflow.recipes import digits

    def cli(*args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["inspect", *args])
        return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

    keras.utils.set_random_seed(0)
    result = {
        "count_params": int(digits({}).model().count_params()),
        "table": cli("digits", "--batch-size", "4", "--engine", "tensorflow"),
        "json": cli("digits", "--batch-size", "2", "--precision", "bf16-mixed", "--json", "--engine", "tensorflow"),
        "wrong": cli("tf_wrong_model:wrong", "--engine", "tensorflow"),
        "torch_recipe": cli("--config", "run.yaml"),  # the engine from the config file
    }
    print("RESULT" + json.dumps(result))
    """
)

MODULE = textwrap.dedent(
    """
    import keras
    import numpy as np
    from gpulab.engines.tensorflow.trainer import TfRecipe
    from gpulab.engines.torch.recipes.mlp import build

    def wrong(options):  # Reshape wants 35 values; the Dense gives 32
        def model():
            return keras.Sequential(
                [keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(32), keras.layers.Reshape((5, 7))]
            )
        x = np.zeros((16, 8, 8, 1), "float32")
        return TfRecipe(model=model, train_data=(x, np.zeros(16, "int64")), loss_fn=None, optimizer=None)

    def torch_recipe(options):
        return build(options)
    """
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    where = tmp_path_factory.mktemp("tfinspect")
    (where / "tf_wrong_model.py").write_text(MODULE)
    (where / "run.yaml").write_text("recipe: tf_wrong_model:torch_recipe\nengine: tensorflow\n")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=where, capture_output=True, text=True, timeout=300
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[len("RESULT") :])


def test_the_digits_table_totals_keras_own_parameter_count(results):
    table = results["table"]
    assert table["code"] == 0, table["err"]
    out = table["out"]
    assert f"parameters: {results['count_params']:,} trainable" in out
    assert "conv2d_1" in out and "4×8×8×32 f32" in out and "4×10 f32" in out
    assert "TensorFlow's graph profiler's count" in out and "predicted peak memory: n/a" in out


def test_json_rows_and_totals_with_the_float32_output_layer_flagged(results):
    r = results["json"]
    assert r["code"] == 0, r["err"]
    report = json.loads(r["out"])
    assert report["engine"] == "tensorflow" and report["run_dtype"] == "bf16" and report["failure"] is None
    rows = {row["name"]: row for row in report["rows"]}
    assert rows[""]["depth"] == 0 and rows["dense"]["depth"] == 1
    assert rows["conv2d_1"]["outputs"] == [{"shape": [2, 8, 8, 64], "dtype": "bf16"}]
    assert rows["conv2d_1"]["activation_bytes"] == 2 * 8 * 8 * 64 * 2
    assert rows["dense_1"]["cast_dtype"] == "f32" and rows["dense"]["cast_dtype"] is None
    assert rows["dense"]["flops_forward"] == 2 * 2 * 1024 * 128 + 2 * 128  # matmul + bias, by TF's profiler
    totals = report["totals"]
    assert totals["params_trainable"] == results["count_params"] and totals["params_frozen"] == 0
    assert totals["flops_per_sample"] > 0 and totals["predicted_peak_bytes"] is None


def test_a_wrong_shape_model_is_named_in_one_line(results):
    r = results["wrong"]
    assert r["code"] == 2
    (line,) = [x for x in r["err"].splitlines() if x.startswith("gpulab: error")]
    assert "layer 'reshape' (Reshape) failed on its input -1×32 f32" in line
    assert "target_shape=(5, 7)" in line
    assert "FAILED here" in r["out"] and "dense" in r["out"]


def test_a_torch_recipe_is_refused_in_one_line(results):
    r = results["torch_recipe"]
    assert r["code"] == 2 and "returned a Recipe, not a TfRecipe" in r["err"]
