"""One training step of a built-in recipe's model on TensorFlow, as ``engines.torch.bench.Stepper`` on torch.

The same model sizes (``measure.bench_models.MODELS``) through the TensorFlow engine's recipes and precisions.
The step is a ``tf.function`` (TensorFlow's normal way to train: Keras's fit does the same), with
``jit=True`` compiled by XLA. Batches are device-resident tensors taken in turn, so the step is timed, not
the input pipeline. Every ``step()`` reads its loss back, which waits for the device (TensorFlow's GPU
kernels are asynchronous; on a CPU the read costs microseconds).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from gpulab.engines.tensorflow.data import as_arrays
from gpulab.engines.tensorflow.devices import device_facts
from gpulab.engines.tensorflow.precision import resolve_precision
from gpulab.engines.tensorflow.recipes import load_tf_recipe
from gpulab.measure.bench_models import MODELS


class TfStepper:
    """Built by ``tf_stepper``; ``step()`` is one optimizer step over ``accumulate`` micro-batches."""

    def __init__(self, tf: Any, keras: Any, recipe: Any, precision: Any, batch_size: int, **kw: Any) -> None:
        self.tf, self.batch_size, self.accumulate = tf, batch_size, kw.get("accumulate", 1)
        self.model = recipe.model()
        optimizer = kw.get("optimizer") or recipe.optimizer(1000)
        self.optimizer = precision.wrap_optimizer(keras, optimizer)
        self.scales = precision.scales_loss
        self.loss_fn = recipe.loss_fn
        x, y = as_arrays(kw.get("data") or recipe.train_data)
        n = (len(x) // batch_size) * batch_size
        if n == 0:
            raise ValueError(f"{len(x)} samples, fewer than one batch of {batch_size}")
        self.batches = [
            (tf.constant(x[i : i + batch_size]), tf.constant(y[i : i + batch_size]))
            for i in range(0, n, batch_size)
        ]
        self.cursor = 0
        self.compiled = tf.function(self._step, jit_compile=bool(kw.get("jit")), reduce_retracing=True)

    def _step(self, x: Any, y: Any) -> Any:
        tf, k = self.tf, self.accumulate
        variables = self.model.trainable_variables
        grads, loss = None, None
        for xs, ys in zip(tf.split(x, k), tf.split(y, k), strict=True):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self.loss_fn(ys, self.model(xs, training=True)))
                scaled = loss / k
                if self.scales:
                    scaled = self.optimizer.scale_loss(scaled)
            g = tape.gradient(scaled, variables)
            grads = g if grads is None else [a + b for a, b in zip(grads, g, strict=True)]
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    def step(self) -> float:
        """One optimizer step; returns its last micro-batch's loss (read back: the device has finished)."""
        x, y = self.batches[self.cursor % len(self.batches)]
        self.cursor += 1
        return float(self.compiled(x, y))

    def eval_loss(self) -> float:
        """The loss on the first batch, the same one before and after training."""
        x, y = self.batches[0]
        return float(self.tf.reduce_mean(self.loss_fn(y, self.model(x, training=False))))

    def parameters_vector(self) -> np.ndarray:
        return np.concatenate([v.numpy().astype(np.float64).ravel() for v in self.model.trainable_variables])


@contextlib.contextmanager
def tf_stepper(
    tf_device: str, model: str, precision: str = "fp32", *, batch_size: int | None = None, **kw: Any
) -> Iterator[TfStepper]:
    """A ``TfStepper`` for ``MODELS[model]``, seeded, built and run on ``tf_device`` under ``precision``
    (Keras's policy and TF32 are process-wide: set for the stepper's life, restored after)."""
    import keras

    tf = __import__("tensorflow")
    recipe_name, options, default_batch = MODELS[model]
    recipe = load_tf_recipe(recipe_name, dict(options))
    policy = resolve_precision(precision, device_facts(tf, tf_device), 2.0**16, 2000)
    keras.utils.set_random_seed(0)
    with policy.applied(tf, keras), tf.device(tf_device):
        yield TfStepper(tf, keras, recipe, policy, batch_size or default_batch, **kw)


def peak_memory_tf(tf: Any, tf_device: str, fn: Any) -> tuple[float | None, str]:
    """(MiB, what it is) of one call of ``fn``: TensorFlow's allocator peak on a GPU; on a CPU TensorFlow
    reports no memory (``get_memory_info`` is GPU-only), so (None, why)."""
    if not tf_device.startswith("/GPU"):
        return None, "n/a on CPU: TensorFlow reports allocator memory only for GPUs (get_memory_info)"
    name = tf_device.lstrip("/")
    tf.config.experimental.reset_memory_stats(name)
    fn()
    return tf.config.experimental.get_memory_info(name)["peak"] / 2**20, (
        "peak bytes allocated by TensorFlow on the GPU (tf.config.experimental.get_memory_info)"
    )
