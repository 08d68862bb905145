"""Run in its own process by test_export_keras_numpy.py: a user's Keras recipe whose data are NumPy arrays
(validation: NumPy, or a tf.data.Dataset with --set options.val=dataset, or a generator of batches),
trained, exported as SavedModel and TFLite, and run through ``gpulab infer``, all through the CLI; prints
one ``RESULT {...}`` line."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np

from gpulab.cli import main

RECIPE = """
import numpy as np
import keras
from gpulab.engines.tensorflow.trainer import TfRecipe


def build(options):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 6)).astype("float32")
    y = (x[:, :3].sum(1) > 0).astype("int64")
    train, val = (x[:384], y[:384]), (x[384:], y[384:])
    if options.get("val") == "dataset":  # training and validation data as tf.data datasets of batches
        import tensorflow as tf

        train = tf.data.Dataset.from_tensor_slices(train).batch(64)
        val = tf.data.Dataset.from_tensor_slices(val).batch(50)
    elif options.get("val") == "generator":  # ... or as generators of batches
        train = ((x[i : i + 64], y[i : i + 64]) for i in range(0, 384, 64))
        val = ((x[i : i + 40], y[i : i + 40]) for i in range(384, 512, 40))

    def model():
        inputs = keras.Input((6,))
        hidden = keras.layers.BatchNormalization()(keras.layers.Dense(16, activation="relu")(inputs))
        return keras.Model(inputs, keras.layers.Dense(2, dtype="float32")(hidden))

    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=model,
        train_data=train,
        val_data=val,
        loss_fn=lambda y, out: ce(y, out),
        optimizer=lambda steps: keras.optimizers.Adam(1e-2),
        defaults={"batch_size": 32},
    )
"""


def cli(*argv: str) -> dict:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(argv))
    return {"code": code, "err": err.getvalue().strip()[-500:]}


def main_() -> None:
    root = Path(sys.argv[1])
    (root / "keras_numpy_recipe.py").write_text(RECIPE)
    sys.path.insert(0, str(root))
    result: dict = {}
    for val in ("numpy", "dataset", "generator"):
        run = root / val
        option = [] if val == "numpy" else ["--set", f"options.val={val}"]
        train = cli(
            "train", "keras_numpy_recipe:build", "--engine", "tensorflow", "--out", str(run),
            "--max-steps", "20", "--set", "progress=false", *option,
        )  # fmt: skip
        result[val] = {"train": train}
        inspect = ["inspect", "keras_numpy_recipe:build", "--engine", "tensorflow", "--batch-size", "8"]
        result[val]["inspect"] = cli(*inspect, *option)
        for fmt in ("savedmodel", "tflite") if val == "numpy" else ("savedmodel",):
            code = cli("export", str(run), "--format", fmt, "--recipe", "keras_numpy_recipe:build")
            artifact = run / "export" / f"keras_numpy_recipe-build.{fmt}"
            parity = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
            infer = cli("infer", str(artifact), "--recipe-data", "--recipe", "keras_numpy_recipe:build")
            with np.load(artifact.with_name(artifact.name + ".predictions.npz")) as npz:
                rows = len(npz["output"])
            result[val][fmt] = {"export": code, "parity": parity, "infer": infer, "rows": rows}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main_()
