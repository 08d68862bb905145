"""``resume_data: skip``: a user's ``DataLoader`` over a map-style dataset resumes mid-epoch without loading
the batches the checkpoint had consumed.

Replay (``loader_rng.replay``, the default) remakes the epoch's iterator from the saved generator states and
loads the consumed batches again, so that workers' and ``__getitem__``'s random augmentations are drawn
again too: exact, at the cost of that part of the epoch's data time (resuming at 90 % of an epoch costs 90 %
of its loading). Skip draws what the loader itself draws -- the workers' base seed, then the sampler's
order -- from the same saved states, takes the epoch's remaining index batches from the sampler (indices
only: no item is loaded) and loads those alone. The sample order is the uninterrupted run's, and the
loader's generators end the epoch where that run's did; what it does not replay are the random
augmentations drawn while loading the skipped batches, so the resumed epoch's augmentations differ.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from gpulab.engines.torch.data.loader_rng import loader_generators, set_global, streams_kept
from gpulab.errors import ConfigError, GpulabWarning

MODES = ("replay", "skip")


def check_skippable(loader: DataLoader) -> None:
    """``resume_data: skip`` needs indices to skip: refused in one line for a stream."""
    if isinstance(loader.dataset, IterableDataset):
        raise ConfigError(
            f"resume_data: skip needs a map-style dataset (indices to skip at the sampler), but the "
            f"DataLoader streams an IterableDataset ({type(loader.dataset).__name__}); set resume_data: "
            "replay (the default), or give a StatefulDataLoader that resumes the stream itself"
        )


def skip(loader: DataLoader, start: int, saved: dict[str, Any], epoch: int) -> Iterator[Any]:
    """The batches of an epoch from batch ``start`` on, its iterator having begun at ``saved``
    (``loader_rng.capture``), with no item of the first ``start`` batches loaded."""
    for generator, state in zip(loader_generators(loader), saved["generators"], strict=True):
        generator.set_state(state)
    with streams_kept():  # the training's streams, as the checkpoint restored them
        set_global(saved)
        # As the epoch's iterator did: a base seed for the workers (none where persistent workers kept
        # theirs), then the sampler's order, each from the generator it was drawn from.
        fresh = saved.get("fresh", True)
        seed = (
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item() if fresh else epoch
        )
        indices = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
        rest = list(itertools.islice(iter(indices), start, None))
    warnings.warn(
        f"resume_data: skip: epoch {epoch} resumes at batch {start} without loading the {start} before it; "
        "their random augmentations (in DataLoader workers or __getitem__) are not replayed, so this epoch's "
        "augmentations differ from the uninterrupted run's (resume_data: replay for a bit-identical resume)",
        GpulabWarning,
        stacklevel=3,
    )
    return iter(_over(loader, rest, seed))


def _over(loader: DataLoader, rest: list[Any], seed: int) -> DataLoader:
    """``loader`` loading ``rest`` (index batches, or indices where it does not batch), its workers seeded
    from ``seed`` through a generator of their own (the training's streams untouched)."""
    batching = loader.batch_sampler is not None
    return DataLoader(
        loader.dataset,
        batch_size=1 if batching else None,  # what a batch_sampler requires
        batch_sampler=rest if batching else None,
        sampler=None if batching else rest,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=torch.Generator().manual_seed(seed),
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=False,  # one partial epoch; the loader's own workers serve the next
    )
