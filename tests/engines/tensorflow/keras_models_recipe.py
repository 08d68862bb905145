"""Keras models as users write them (not collected by pytest), each a recipe for the TensorFlow engine:

- ``subclassed``: ``class Net(keras.Model)`` with ``call()`` (no variables before its first call), with
  dropout; ``options["fail"]`` makes its call raise, and ``options["nan_from"]`` makes the learning
  rate NaN from that optimizer step on (the loss is NaN two steps later: a run that fails there);
- ``two_outputs``: a functional model of two outputs (``cls`` class scores, ``reg`` one value), with
  ``options["loss"]``: ``dict`` (a dict of losses with loss_weights, as ``model.compile`` takes them),
  ``list`` (the same in the outputs' order), ``summed`` (one loss_fn over both), or ``bad_key`` /
  ``weights_alone`` (a user's mistakes)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gpulab.engines.tensorflow import TfRecipe

WEIGHTS = {"cls": 1.0, "reg": 0.5}


def arrays(n: int, seed: int):
    r = np.random.default_rng(seed)
    x = r.normal(size=(n, 6)).astype("float32")
    return x, {"cls": (x[:, 0] + x[:, 1] > 0).astype("int64"), "reg": x[:, 2:3] * 2.0 - x[:, 3:4]}


class Net(keras.Model):
    def __init__(self, fail: bool = False):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.dropout = keras.layers.Dropout(0.2)
        self.out = keras.layers.Dense(2)
        self.fail = fail

    def call(self, x, training=False):
        if self.fail:
            raise ValueError("the user's call() fails")
        return self.out(self.dropout(self.hidden(x), training=training))


class NanFrom(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, step: int):
        self.step = step

    def __call__(self, step):
        return tf.where(step < self.step, 1e-2, float("nan"))


def subclassed(options: dict) -> TfRecipe:
    x, y = arrays(96, 0)
    vx, vy = arrays(32, 1)
    nan_from = options.get("nan_from")
    return TfRecipe(
        model=lambda: Net(fail=bool(options.get("fail"))),
        train_data=(x, y["cls"]),
        val_data=(vx, vy["cls"]),
        loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        optimizer=lambda total: keras.optimizers.Adam(NanFrom(nan_from) if nan_from else 1e-2),
        correct_fn=lambda y, out: tf.cast(tf.equal(tf.argmax(out, -1), y), tf.float32),
    )


def two_output_model():
    x = keras.Input((6,), name="x")
    h = keras.layers.Dense(16, activation="relu")(x)
    cls, reg = keras.layers.Dense(2, name="cls")(h), keras.layers.Dense(1, name="reg")(h)
    return keras.Model(x, {"cls": cls, "reg": reg})


def losses() -> dict:
    return {"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"}


def two_outputs(options: dict) -> TfRecipe:
    form = options.get("loss", "dict")
    loss_fn, weights = losses(), dict(WEIGHTS)
    if form == "list":
        loss_fn, weights = list(loss_fn.values()), list(weights.values())
    elif form == "summed":
        ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        mse = keras.losses.MeanSquaredError(reduction=None)
        loss_fn, weights = lambda y, out: ce(y["cls"], out["cls"]) + 0.5 * mse(y["reg"], out["reg"]), None
    elif form == "bad_key":
        loss_fn = {"cls": loss_fn["cls"], "regression": "mse"}
    elif form == "weights_alone":
        loss_fn = keras.losses.MeanSquaredError(reduction=None)
    return TfRecipe(
        model=two_output_model,
        train_data=arrays(96, 0),
        val_data=arrays(32, 1),
        loss_fn=loss_fn,
        loss_weights=weights,
        optimizer=lambda total: keras.optimizers.Adam(1e-2),
    )
