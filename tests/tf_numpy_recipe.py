"""A TensorFlow recipe on NumPy arrays (a user's own `module:build`), written into a test's folder as a file:
tests/engines/test_registry.py and tests/engines/tensorflow/launch/test_tflaunch_worker_mistake.py."""

NUMPY_RECIPE = """
import keras
import numpy as np

from gpulab.engines.tensorflow import TfRecipe


def build(options):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 4)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, dtype="float32")]),
        train_data=(x, y),
        loss_fn=lambda y, out: bce(y, out),
        optimizer=lambda total_steps: keras.optimizers.SGD(0.1),
        defaults={"batch_size": 32},
    )
"""
