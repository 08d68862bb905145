"""A worker of the `gpulab launch --engine tensorflow` test: MultiWorkerMirroredStrategy, custom loop.

``python tflaunch_mwms_job.py OUT PER_WORKER_BATCH STEPS``. Keras 3's ``model.fit`` fails under MWMS, so the
loop is written by hand: GradientTape inside ``strategy.run``, ``tf.nn.compute_average_loss`` over the
global batch, ``strategy.reduce`` of the loss, a distributed ``tf.data`` dataset (worker w takes
examples w, w+n, ...: one step of n workers sees the same examples as one worker at n times the batch).

Every worker writes ``workerI.json`` (its final weights, TF_CONFIG as it saw it); the chief (worker 0)
also writes ``summary.json`` with the reference: the same model and examples trained in this process
without a strategy at the global batch size.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

LR = 0.1


def mlp() -> keras.Model:
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 1)) + 0.1 * rng.standard_normal((256, 1))).astype(np.float32)
    return x, y


def reference(init: list[np.ndarray], x, y, batch: int, steps: int) -> list[np.ndarray]:
    """One process, no strategy, the global batch: what the workers together must match."""
    model = mlp()
    model.set_weights(init)
    opt = keras.optimizers.SGD(LR)
    for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).take(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(model(xb) - yb), axis=-1))
        opt.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
    return [w.tolist() for w in model.get_weights()]


def main(out: Path, per_worker_batch: int, steps: int) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    index = strategy.cluster_resolver.task_id
    global_batch = per_worker_batch * strategy.num_replicas_in_sync
    x, y = data()

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(global_batch))

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = mlp()
        opt = keras.optimizers.SGD(LR)
    init = model.get_weights()

    @tf.function
    def train_step(xb, yb):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_sum(tf.square(model(xb, training=True) - yb), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(step, args=(xb, yb)), axis=None)

    losses = []
    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    for _ in range(steps):
        losses.append(float(train_step(*next(it))))
    result = {
        "index": index,
        "tf_config": json.loads(os.environ["TF_CONFIG"]),
        "replicas": strategy.num_replicas_in_sync,
        "losses": losses,
        "weights": [w.tolist() for w in model.get_weights()],
    }
    out.mkdir(parents=True, exist_ok=True)  # as the README runs it, into a new directory
    (out / f"worker{index}.json").write_text(json.dumps(result))
    if index == 0:  # the chief writes the shared files
        ref = reference(init, x, y, global_batch, steps)
        init_json = [w.tolist() for w in init]
        (out / "summary.json").write_text(
            json.dumps({"world_size": result["replicas"], "reference": ref, "init": init_json})
        )
        diff = max(
            float(np.abs(np.asarray(a) - np.asarray(r)).max())
            for a, r in zip(result["weights"], ref, strict=True)
        )
        print(
            f"chief: {steps} steps x global batch {global_batch} on {result['replicas']} workers, final loss "
            f"{losses[-1]:.4f}; max |weight - 1 worker at batch {global_batch}| = {diff:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
