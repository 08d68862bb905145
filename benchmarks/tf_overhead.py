"""The TensorFlow side of the overhead benchmark, on the launch-bound `mlp` workload: µs per optimizer step.

  (a) Keras ``model.compile(...); model.fit(x, y, batch_size=64, epochs=...)`` as its tutorials write it
      (Keras 3 defaults: ``jit_compile="auto"``, i.e. XLA where the model allows)
  (b) gpulab's TensorFlow engine (``TfTrainer``) with its defaults (its own GradientTape loop over a
      distributed ``tf.data`` pipeline, metrics read every 50 steps), no output directory
  (c) a hand-written loop: ``tf.data`` shuffle/batch/prefetch and a ``tf.function`` GradientTape step

Each is timed from the end of its first step (tracing and compilation excluded) to the end of its last:
the same 8 epochs of 125 steps (10,000 samples, 80% train, batch 64), Adam, lr 1e-3. Repeats are
interleaved (a, b, c, a, ...) so drift in machine load hits all three alike; medians, then ratios.
Usage: python benchmarks/tf_overhead.py [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from gpulab.core.callbacks import Callback  # noqa: E402
from gpulab.engines.tensorflow.recipes import mlp  # noqa: E402
from gpulab.engines.tensorflow.trainer import TfTrainer  # noqa: E402

BATCH, EPOCHS = 64, 8


class _Stamp:
    """Times from the end of step 1 to the end of the last step."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0
        self.steps = 0

    def step(self) -> None:
        now = time.perf_counter()
        self.steps += 1
        if self.first is None:
            self.first = now
        self.last = now

    def us_per_step(self) -> float:
        return (self.last - self.first) / (self.steps - 1) * 1e6


def keras_fit(recipe) -> float:
    keras.utils.set_random_seed(0)
    x, y = recipe.train_data  # NumPy arrays (recipe_data.py)
    model = recipe.model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.BinaryCrossentropy(from_logits=True)
    )
    stamp = _Stamp()

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamp.step()

    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[Timer()])
    return stamp.us_per_step()


def gpulab_engine(recipe) -> float:
    stamp = _Stamp()

    class Timer(Callback):
        def on_step_end(self, trainer, state):
            stamp.step()

    recipe.val_data = None  # (a) and (c) do not validate either
    TfTrainer(epochs=EPOCHS, batch_size=BATCH, progress=False, callbacks=[Timer()]).fit(recipe)
    return stamp.us_per_step()


def hand_written(recipe) -> float:
    keras.utils.set_random_seed(0)
    x, y = recipe.train_data  # NumPy arrays (recipe_data.py)
    model = recipe.model()
    opt = keras.optimizers.Adam(1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    ds = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0)
        .batch(BATCH)
        .prefetch(tf.data.AUTOTUNE)
    )

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = bce(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    stamp = _Stamp()
    for _ in range(EPOCHS):
        for xb, yb in ds:
            loss = step(xb, yb)
            if stamp.first is None:
                float(loss)  # the first step has run (traced and done) before the clock starts
            stamp.step()
    float(loss)  # the last step has finished
    stamp.last = time.perf_counter()
    return stamp.us_per_step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    variants = {"a_keras_fit": keras_fit, "b_gpulab": gpulab_engine, "c_hand_written": hand_written}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            runs[name].append(fn(mlp({})))
    med = {name: statistics.median(v) for name, v in runs.items()}
    report = {
        "us_per_step_median": med,
        "us_per_step_runs": runs,
        "b_over_a": med["b_gpulab"] / med["a_keras_fit"],
        "b_over_c": med["b_gpulab"] / med["c_hand_written"],
        "b_over_min_ac": med["b_gpulab"] / min(med["a_keras_fit"], med["c_hand_written"]),
        "environment": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, value in med.items():
        print(f"{name:16s} {value:9.0f} us/step  (runs: {', '.join(f'{v:.0f}' for v in runs[name])})")
    print(
        f"b/a {report['b_over_a']:.2f}  b/c {report['b_over_c']:.2f}  "
        f"b/min(a,c) {report['b_over_min_ac']:.2f}  (target <= 1.05); "
        f"load average {report['environment']['load_average'][0]:.1f}"
    )


if __name__ == "__main__":
    main()
