"""A TensorFlow recipe for the preemption tests (torch's is tests/cli/preempt_recipe.py): dropout (so the
random stream matters for exact resume) and a pause in each forward pass (``options.pause`` seconds, a
``tf.py_function`` sleep), so a signal lands in the middle of a run or of a step."""

from __future__ import annotations

import time

import numpy as np

from gpulab.engines.tensorflow.trainer import TfRecipe


def build(options: dict) -> TfRecipe:
    import keras
    import tensorflow as tf

    pause = float(options.get("pause", 0.005))

    class Pause(keras.layers.Layer):
        def call(self, x):
            slept = tf.py_function(lambda: time.sleep(pause) or 0.0, [], tf.float32)
            slept.set_shape(())
            return x + tf.cast(slept, x.dtype)  # a data dependency: the sleep runs inside the step

    def model():
        return keras.Sequential(
            [
                keras.Input((8,)),
                Pause(),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(2, dtype="float32"),
            ]
        )

    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 8)).astype("float32")
    y = (x.sum(1) > 0).astype("int64")
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=model,
        train_data=(x, y),
        loss_fn=lambda y, out: ce(y, out),
        optimizer=lambda total_steps: keras.optimizers.AdamW(learning_rate=1e-2),
        defaults={"batch_size": 16, "log_every": 5, "tensorboard": False, "device": "cpu"},
    )
