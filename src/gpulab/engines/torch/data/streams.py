"""Training data of unknown length (an ``IterableDataset``, a stream): what the Trainer needs to know.

A stream has no ``len``: the Trainer then counts ``max_steps`` instead of epochs of known size, and an
epoch is one pass, until the stream runs out. With several ranks, streams seldom run out at the same
step; a rank that has ended would leave the others waiting in the next collective, so at every step the
ranks agree whether all of them still have a batch (one one-element collective; only for streams).

Loader workers: each DataLoader worker runs the stream's whole ``__iter__``, so N workers yield every
sample N times unless ``__iter__`` splits the stream by ``torch.utils.data.get_worker_info()``.
``shards_by_worker`` says whether it does; a stream that does not is loaded in the main process.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

_END = object()


def is_stream(data: Any) -> bool:
    """Whether ``data`` is an ``IterableDataset``, or a ``DataLoader`` over one (its order is its own)."""
    return isinstance(data, IterableDataset) or (
        isinstance(data, DataLoader) and isinstance(data.dataset, IterableDataset)
    )


def shards_by_worker(data: IterableDataset) -> bool:
    """Whether ``data`` gives each DataLoader worker its own share of the stream.

    A dataset says so itself with a ``shards_by_worker`` attribute (True or False), which wins. Without
    one, the answer is whether the source of its ``__iter__`` calls ``get_worker_info`` -- the one way a
    stream can know which worker runs it (Hugging Face's streaming datasets do it there too). An
    ``__iter__`` whose source cannot be read, or that leaves the split to a helper, counts as not
    sharding: the safe side, since wrongly using workers repeats every sample.
    """
    declared = getattr(data, "shards_by_worker", None)
    if declared is not None:
        return bool(declared)
    try:
        source = inspect.getsource(type(data).__iter__)
    except (OSError, TypeError):
        return False
    return "get_worker_info" in source


def stop_together(batches: Iterable[Any], any_rank: Callable[[bool], bool]) -> Iterator[Any]:
    """Yield ``batches`` while every rank has one; at the first step where some rank has run out, every
    rank stops (the batches the others fetched for that step are dropped).

    ``any_rank(flag)`` is True on every rank when ``flag`` is True on any (``Runtime.reduce_flag``).
    """
    iterator = iter(batches)
    while True:
        batch = next(iterator, _END)
        if any_rank(batch is _END):
            return
        yield batch
