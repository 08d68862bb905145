"""Exact resume of a user's own ``DataLoader``: the random state each epoch's order was drawn from.

A ``DataLoader`` draws its epoch's randomness as it is iterated: the workers' base seed (from
``loader.generator``, or torch's global RNG without one) when the iterator is made, and a
``RandomSampler``'s permutation (from its generator -- the loader's when ``shuffle=True`` made it -- or the
global RNG) at the first index. torchdata's ``StatefulDataLoader`` keeps the sampler's generator state as
the epoch's iterator starts and fast-forwards from there; this is the same protocol for a plain
``DataLoader``: every generator it can draw from is captured as the epoch's iterator is made and saved
with the cursor, and a resume puts them back, remakes the iterator and takes the consumed batches again
(loading them, so that workers' random augmentations replay too), with the training's own random streams
put back afterwards.

What it cannot replay is said in one line: persistent workers keep their random streams across epochs,
and a resumed process starts new ones.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from gpulab.engines.torch import torch_private
from gpulab.errors import CheckpointError, GpulabWarning


def loader_generators(loader: DataLoader) -> list[torch.Generator]:
    """The distinct torch generators ``loader`` draws from (its own, its sampler's, its batch sampler's)."""
    parts = (loader, loader.sampler, loader.batch_sampler, getattr(loader.batch_sampler, "sampler", None))
    found: list[torch.Generator] = []
    for part in parts:
        generator = getattr(part, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def persistent(loader: DataLoader) -> bool:
    return bool(loader.persistent_workers) and loader.num_workers > 0


def own_generator(dataset: Any) -> str | None:
    """The attribute holding a random generator of ``dataset``'s own (NumPy's, Python's, torch's) that no
    ``set_epoch`` reseeds: state a checkpoint cannot see, so a resumed epoch draws differently. None if
    there is none."""
    if callable(getattr(dataset, "set_epoch", None)):
        return None
    kinds = (np.random.Generator, np.random.RandomState, random.Random, torch.Generator)
    found = [name for name, value in getattr(dataset, "__dict__", {}).items() if isinstance(value, kinds)]
    return found[0] if found else None


def warn_opaque(loader: DataLoader) -> None:
    """One line, at the first checkpoint, where the resume cannot be exact (``own_generator``)."""
    name = own_generator(loader.dataset)
    if name is None:
        return
    kind = type(loader.dataset).__name__
    warnings.warn(
        f"the dataset {kind} draws from its own generator ({kind}.{name}), which a checkpoint does not "
        "hold: a resumed epoch draws other numbers than the uninterrupted run; give it a set_epoch(epoch) "
        f"that reseeds {name} from the epoch (gpulab calls it every epoch) for a bit-identical resume",
        GpulabWarning,
        stacklevel=4,
    )


def set_epoch(loader: DataLoader, epoch: int) -> None:
    """Every part of ``loader`` that takes the epoch (``DistributedSampler``; a dataset's ``set_epoch``)."""
    for part in (loader.sampler, loader.batch_sampler, loader.dataset):
        if callable(getattr(part, "set_epoch", None)):
            part.set_epoch(epoch)


def capture(loader: DataLoader) -> dict[str, Any]:
    """What the next ``iter(loader)`` will draw from: the loader's generators, the global streams (torch's,
    Python's and NumPy's: a custom sampler's ``random.shuffle`` draws there), and whether it makes a new
    iterator (``fresh``; a persistent workers' one is made once and reset after). Tensors, ints and
    lists only: a checkpoint reads it back with ``weights_only``."""
    version, words, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "generators": [g.get_state() for g in loader_generators(loader)],
        "torch": torch.get_rng_state(),
        "python": [int(version), torch.tensor(words, dtype=torch.int64), [] if gauss is None else [gauss]],
        "numpy": [torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "fresh": not (persistent(loader) and torch_private.loader_has_live_iterator(loader)),
    }


def set_global(saved: dict[str, Any]) -> None:
    """The global streams as ``capture`` found them (Python's and NumPy's where saved)."""
    torch.set_rng_state(saved["torch"])
    if "python" in saved:
        version, words, gauss = saved["python"]
        random.setstate((version, tuple(words.tolist()), gauss[0] if gauss else None))
    if "numpy" in saved:
        keys, pos, has_gauss, cached = saved["numpy"]
        np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def check(loader: DataLoader, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it fits ``loader``; a ``CheckpointError`` naming the difference otherwise."""
    have, saved = len(loader_generators(loader)), state.get("generators")
    if not isinstance(saved, list) or len(saved) != have or not isinstance(state.get("torch"), torch.Tensor):
        count = len(saved) if isinstance(saved, list) else "no"
        raise CheckpointError(
            f"the checkpoint's DataLoader drew from {count} generators and this one draws from {have}: "
            "resume with the DataLoader the run was started with"
        )
    return state


def replay(loader: DataLoader, start: int, saved: dict[str, Any] | None, epoch: int) -> Iterator[Any]:
    """``iter(loader)`` from batch ``start`` of an epoch whose iterator began at ``saved`` (None: it
    begins now, with the generators as they are)."""
    if saved is None:
        return iter(loader)
    for generator, state in zip(loader_generators(loader), saved["generators"], strict=True):
        generator.set_state(state)
    fresh_now = not (persistent(loader) and torch_private.loader_has_live_iterator(loader))
    if fresh_now and not saved["fresh"]:
        warnings.warn(
            f"resuming epoch {epoch} of a DataLoader with persistent_workers=True: the sample order is "
            "restored, but its workers start new random streams (random augmentations in __getitem__ "
            "differ from the uninterrupted run); set persistent_workers=False for a bit-identical resume",
            GpulabWarning,
            stacklevel=3,
        )
    reset_then = fresh_now and not saved["fresh"]
    if start == 0 and not reset_then:
        return iter(loader)
    with streams_kept():  # the training's streams, as the checkpoint restored them
        set_global(saved)
        with _base_seed_aside(loader) if reset_then else contextlib.nullcontext():
            batches = iter(loader)
        for _ in range(start):  # loaded and dropped: what the workers and the dataset drew is drawn again
            next(batches)
    return batches


@contextlib.contextmanager
def _base_seed_aside(loader: DataLoader) -> Iterator[None]:
    """With persistent workers, epochs after the first reuse the iterator and draw no base seed; a
    resumed process makes a new one, whose base seed is drawn here from a generator of its own so that
    the sampler draws exactly what the reset iterator would have."""
    own = loader.generator
    loader.generator = torch.Generator()
    try:
        yield
    finally:
        loader.generator = own


@contextlib.contextmanager
def streams_kept() -> Iterator[None]:
    """Python's, NumPy's and torch's global random streams as they were (a replayed ``__getitem__`` in
    the main process draws from them)."""
    py, npy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
