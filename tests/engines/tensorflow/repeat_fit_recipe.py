"""A recipe as a Keras user writes one (not collected by pytest): its data a ``tf.data`` pipeline shuffled
with a fixed op seed, which TensorFlow combines with the global seed as it is made, and a dropout layer."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from gpulab.engines.tensorflow import TfRecipe


def build(options: dict) -> TfRecipe:
    r = np.random.default_rng(0)
    x = r.normal(size=(96, 6)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(96, seed=0).batch(8)

    def model():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dropout(0.2), keras.layers.Dense(2)])  # fmt: skip

    return TfRecipe(
        model=model,
        train_data=data,
        loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        optimizer=lambda total_steps: keras.optimizers.Adam(1e-2),
        defaults={"batch_size": 8, "tensorboard": False, "device": "cpu"},
    )
