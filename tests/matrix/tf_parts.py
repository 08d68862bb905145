"""The TensorFlow side of a matrix cell, written as a Keras user writes it: ``recipe(cell, options)`` builds
the TfRecipe of a cell's data, batch and model values (tests/matrix/setups.py). Each value is one entry."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gpulab.engines.tensorflow import TfRecipe

SAMPLES, FEATURES, BATCH = 96, 6, 8


def arrays(model: str, n: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The model's inputs by name, and the labels: n samples."""
    x = np.random.default_rng(seed).normal(size=(n, FEATURES)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return ({"a": x[:, :4], "b": x[:, 4:]} if model == "multi_input" else {"x": x}), y


def targets(model: str, y: np.ndarray):
    return {"cls": y, "reg": y.astype("float32")} if model == "multi_output" else y


def shaped(model: str, named: dict[str, np.ndarray], y: np.ndarray, batch: str):
    """``(inputs, target)`` as ``model.fit`` takes it: a tuple of arrays or a dict by input name."""
    x = dict(named) if batch == "dict" else tuple(named.values())
    return (x[0] if isinstance(x, tuple) and len(x) == 1 else x), targets(model, y)


class Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.drop = keras.layers.Dense(16, activation="relu"), keras.layers.Dropout(0.1)
        self.out = keras.layers.Dense(2, dtype="float32")

    def call(self, x, training=False):
        x = x["x"] if isinstance(x, dict) else x
        return self.out(self.drop(self.hidden(x), training=training))


def sequential():
    return keras.Sequential([keras.Input((FEATURES,), name="x"), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dropout(0.1), keras.layers.Dense(2, dtype="float32")])  # fmt: skip


def functional(names: tuple[str, ...], sizes: tuple[int, ...], heads: dict[str, int]):
    ins = [keras.Input((n,), name=name) for name, n in zip(names, sizes, strict=True)]
    hidden = keras.layers.Dense(16, activation="relu")(
        ins[0] if len(ins) == 1 else keras.layers.Concatenate()(ins)
    )
    hidden = keras.layers.Dropout(0.1)(hidden)
    outs = {k: keras.layers.Dense(n, dtype="float32", name=k)(hidden) for k, n in heads.items()}
    return keras.Model(ins if len(ins) > 1 else ins[0], outs if len(outs) > 1 else outs["out"])


ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)


def _mse(y, out):
    return tf.square(tf.cast(y, out.dtype) - out[:, 0])


MODELS = {  # model value: (model factory, loss_fn)
    "loss_fn": (sequential, ce),
    "multi_input": (lambda: functional(("a", "b"), (4, 2), {"out": 2}), ce),
    "multi_output": (lambda: functional(("x",), (FEATURES,), {"cls": 2, "reg": 1}), {"cls": ce, "reg": _mse}),
    "keras_subclassed": (Subclassed, ce),
}


def recipe(cell: dict[str, str], options: dict) -> TfRecipe:
    model, batch = cell["model"], cell["batch"]
    train = shaped(model, *arrays(model, SAMPLES, 0), batch)
    if cell["data"] == "tfdata":
        train = tf.data.Dataset.from_tensor_slices(train).shuffle(SAMPLES, seed=0).batch(BATCH)

    def optimizer(total_steps: int):
        lr = 1e-2
        if cell["schedule"] == "user_scheduler":
            lr = keras.optimizers.schedules.ExponentialDecay(
                1e-2, decay_steps=4, decay_rate=0.5, staircase=True
            )
        return keras.optimizers.Adam(learning_rate=lr)

    return TfRecipe(
        model=MODELS[model][0],
        train_data=train,
        val_data=shaped(model, *arrays(model, 32, 1), batch),
        loss_fn=MODELS[model][1],
        optimizer=optimizer,
        defaults={"batch_size": BATCH, "tensorboard": False, "device": "cpu", "log_every": 2},
    )


def example(model: str, n: int) -> dict[str, np.ndarray]:
    return arrays(model, n, 2)[0]


def prediction(output) -> np.ndarray:
    """What export serves: the tensor, or the first output of a dict."""
    if isinstance(output, dict):
        output = next(iter(output.values()))
    return np.asarray(output)
