"""A functional Keras model built on one named input, its data a dict by that name, as ``model.fit`` takes
it (not collected by pytest)."""

from __future__ import annotations

import keras
import numpy as np

from gpulab.engines.tensorflow import TfRecipe


def build(options: dict) -> TfRecipe:
    r = np.random.default_rng(0)
    x = r.normal(size=(96, 6)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")

    def model():
        features = keras.Input((6,), name="features")
        hidden = keras.layers.Dense(16, activation="relu")(features)
        return keras.Model(features, keras.layers.Dense(2)(keras.layers.Dropout(0.1)(hidden)))

    return TfRecipe(
        model=model,
        train_data=({"features": x}, y),
        val_data=({"features": x[:32]}, y[:32]),
        loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None),
        optimizer=lambda total_steps: keras.optimizers.Adam(1e-2),
        defaults={"batch_size": 8, "tensorboard": False, "device": "cpu"},
    )
