"""The ``tf.data`` input pipeline: the recipe's arrays -> cached, seeded-shuffled, batched, prefetched,
auto-sharded by data across workers, distributed over the strategy's replicas.

``data_cache`` (auto: when the arrays take at most ``CACHE_LIMIT_BYTES``) and ``prefetch_factor`` (batches
prepared ahead; None: ``tf.data.AUTOTUNE``) are settings, so ``gpulab tune`` can measure them.

``batch_size`` is per replica, as on torch (per device): a global batch is ``batch_size x replicas``.
The last batch of an epoch may be short, as torch's loader keeps it (no drop_last).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CACHE_LIMIT_BYTES = 1 << 30  # cache a source that fits comfortably in host memory


def as_arrays(data: Any) -> tuple[np.ndarray, ...]:
    """The recipe's ``(x, y)`` (torch tensors or NumPy arrays; or a finite ``tf.data.Dataset`` or
    generator of ``(x, y)`` batches, as ``model.fit`` takes them: read once, batches concatenated) as
    NumPy arrays."""
    if hasattr(data, "as_numpy_iterator") or hasattr(data, "__next__"):
        batches = [
            tuple(np.asarray(t) for t in batch)
            for batch in getattr(data, "as_numpy_iterator", lambda: data)()
        ]
        return tuple(np.concatenate(parts) for parts in zip(*batches, strict=True))
    return tuple(d.numpy() if hasattr(d, "numpy") else np.asarray(d) for d in data)


def make_dataset(
    tf: Any,
    arrays: tuple[np.ndarray, ...],
    global_batch: int,
    *,
    shuffle: bool,
    seed: int,
    cache: bool | str = "auto",
    prefetch: int | None = None,
) -> Any:
    """Validation's pipeline (and any pass in a fixed order); training takes ``epoch_dataset``."""
    return finish(
        tf, source(tf, arrays, cache), global_batch,
        shuffle=shuffle, seed=seed, samples=len(arrays[0]), prefetch=prefetch,
    )  # fmt: skip


def caches(arrays: tuple[np.ndarray, ...], cache: bool | str) -> bool:
    """Whether the source is cached: ``cache`` itself, or for ``auto`` whether the arrays are small."""
    return sum(a.nbytes for a in arrays) <= CACHE_LIMIT_BYTES if cache == "auto" else bool(cache)


def source(tf: Any, arrays: tuple[np.ndarray, ...], cache: bool | str = "auto") -> Any:
    ds = tf.data.Dataset.from_tensor_slices(arrays)
    if caches(arrays, cache):
        ds = ds.cache()  # later epochs read the materialised elements instead of slicing again
    return ds


def epoch_dataset(
    tf: Any,
    base: Any,
    samples: int,
    global_batch: int,
    *,
    seed: int,
    epoch: int,
    skip: int,
    prefetch: int | None = None,
) -> Any:
    """Epoch ``epoch``'s batches from batch ``skip`` on. The order is a function of (seed, epoch) alone, as
    torch's sampler's ``seed + epoch``: the same on every run and worker, and a resumed run continues at
    the next batch of the same order (exact resume) without replaying the epochs before it."""
    ds = finish(tf, base, global_batch, shuffle=True, seed=seed + epoch, samples=samples, prefetch=prefetch)
    return ds.skip(skip) if skip else ds


def finish(
    tf: Any, ds: Any, global_batch: int, *, shuffle: bool, seed: int, samples: int, prefetch: int | None
) -> Any:
    if shuffle:
        ds = ds.shuffle(samples, seed=seed, reshuffle_each_iteration=False)
    ds = ds.batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE if prefetch is None else prefetch)


def batches_per_epoch(samples: int, global_batch: int) -> int:
    return -(-samples // global_batch)


def batch_samples(samples: int, global_batch: int, index: int) -> int:
    """Samples in batch ``index`` of an epoch (the last may be short), known on the host: no sync."""
    return min(global_batch, samples - index * global_batch)
