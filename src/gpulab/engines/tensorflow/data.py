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

from gpulab.artifact.arrays import concatenate, leaves, tree_map

CACHE_LIMIT_BYTES = 1 << 30  # cache a source that fits comfortably in host memory


def as_arrays(data: Any) -> tuple[Any, ...]:
    """The recipe's ``(x, y)`` as NumPy, in any form ``model.fit`` takes: arrays or tensors, ``x`` a dict
    of them (a model's named inputs) or a tuple of them (several inputs); or a finite ``tf.data.Dataset``
    or generator of such ``(x, y)`` batches (read once, batches concatenated). Each part keeps its
    nesting (``tree_map``)."""
    return read(data)[0]


def read(data: Any) -> tuple[tuple[Any, ...], int | None]:
    """``as_arrays``, and the size of the first batch where the data came in batches (else None)."""
    if hasattr(data, "as_numpy_iterator") or hasattr(data, "__next__"):
        batches = [tuple(batch) for batch in getattr(data, "as_numpy_iterator", lambda: data)()]
        if not batches:
            return (), None
        arrays = tuple(concatenate(list(parts)) for parts in zip(*batches, strict=True))
        return arrays, len(leaves(batches[0])[0])
    return tuple(tree_map(_numpy, part) for part in data), None


def num_samples(arrays: tuple[Any, ...]) -> int:
    """The samples of ``(x, y)``: every array's first dimension, which must agree."""
    lengths = {len(a) for a in leaves(arrays)}
    if len(lengths) != 1:
        from gpulab.errors import DataError

        raise DataError(f"the training arrays differ in length ({sorted(lengths)}): give one row per sample")
    return lengths.pop()


def _numpy(a: Any) -> np.ndarray:
    return a.numpy() if hasattr(a, "numpy") else np.asarray(a)


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
        shuffle=shuffle, seed=seed, samples=num_samples(arrays), prefetch=prefetch,
    )  # fmt: skip


def caches(arrays: tuple[np.ndarray, ...], cache: bool | str) -> bool:
    """Whether the source is cached: ``cache`` itself, or for ``auto`` whether the arrays are small."""
    return sum(a.nbytes for a in leaves(arrays)) <= CACHE_LIMIT_BYTES if cache == "auto" else bool(cache)


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
