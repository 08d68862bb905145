"""The ``tf.data`` input pipeline: the recipe's arrays -> cached, seeded-shuffled, batched, prefetched,
auto-sharded by data across workers, distributed over the strategy's replicas.

``batch_size`` is per replica, as on torch (per device): a global batch is ``batch_size x replicas``.
The last batch of an epoch may be short, as torch's loader keeps it (no drop_last).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CACHE_LIMIT_BYTES = 1 << 30  # cache a source that fits comfortably in host memory


def as_arrays(data: Any) -> tuple[np.ndarray, ...]:
    """The recipe's ``(x, y)`` (torch tensors or NumPy arrays) as NumPy arrays."""
    return tuple(d.numpy() if hasattr(d, "numpy") else np.asarray(d) for d in data)


def make_dataset(
    tf: Any, arrays: tuple[np.ndarray, ...], global_batch: int, *, shuffle: bool, seed: int
) -> Any:
    ds = tf.data.Dataset.from_tensor_slices(arrays)
    if sum(a.nbytes for a in arrays) <= CACHE_LIMIT_BYTES:
        ds = ds.cache()  # later epochs read the materialised elements instead of slicing again
    if shuffle:
        # A fixed seed with a reshuffle per epoch: epoch e's order is the same on every run and worker.
        ds = ds.shuffle(len(arrays[0]), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def batches_per_epoch(samples: int, global_batch: int) -> int:
    return -(-samples // global_batch)


def batch_samples(samples: int, global_batch: int, index: int) -> int:
    """Samples in batch ``index`` of an epoch (the last may be short), known on the host: no sync."""
    return min(global_batch, samples - index * global_batch)
