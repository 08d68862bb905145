"""A two-input functional Keras model as a user writes one (not collected by pytest), with its data in
each form ``model.fit`` takes: ``options["form"]`` = ``dict`` (a dict of arrays by input name), ``tuple``
(a tuple of arrays, for a model of positional inputs) or ``dataset`` (a ``tf.data.Dataset`` of
``(dict, y)`` batches of 16)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gpulab.engines.tensorflow import TfRecipe


def arrays(n: int, seed: int):
    r = np.random.default_rng(seed)
    a, b = r.normal(size=(n, 5)).astype("float32"), r.normal(size=(n, 3)).astype("float32")
    return a, b, (a[:, 0] + b[:, 0] > 0).astype("int64")


def model(named: bool):
    a, b = keras.Input((5,), name="a"), keras.Input((3,), name="b")
    hidden = keras.layers.Concatenate()([keras.layers.Dense(8, activation="relu")(a), b])
    hidden = keras.layers.Dropout(0.2)(hidden)
    return keras.Model({"a": a, "b": b} if named else [a, b], keras.layers.Dense(2)(hidden))


def shaped(form: str, a, b, y, batched: bool):
    if form == "tuple":
        return (a, b), y
    if form == "dataset" and batched:
        return tf.data.Dataset.from_tensor_slices(({"a": a, "b": b}, y)).batch(16)
    return {"a": a, "b": b}, y


def build(options: dict) -> TfRecipe:
    form = options.get("form", "dict")
    return TfRecipe(
        model=lambda: model(named=form != "tuple"),
        train_data=shaped(form, *arrays(96, 0), batched=True),
        val_data=shaped(form, *arrays(32, 1), batched=False),
        loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        optimizer=lambda total: keras.optimizers.Adam(1e-2),
        correct_fn=lambda y, out: tf.cast(tf.equal(tf.argmax(out, -1), y), tf.float32),
    )
