"""Training data of unknown length (an ``IterableDataset``, a stream): what the Trainer needs to know.

A stream has no ``len``: the Trainer then counts ``max_steps`` instead of epochs of known size, and an
epoch is one pass, until the stream runs out. With several ranks, streams seldom run out at the same
step; a rank that has ended would leave the others waiting in the next collective, so at every step the
ranks agree whether all of them still have a batch (one one-element collective; only for streams).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

_END = object()


def is_stream(data: Any) -> bool:
    """Whether ``data`` is an ``IterableDataset``, or a ``DataLoader`` over one (its order is its own)."""
    return isinstance(data, IterableDataset) or (
        isinstance(data, DataLoader) and isinstance(data.dataset, IterableDataset)
    )


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
