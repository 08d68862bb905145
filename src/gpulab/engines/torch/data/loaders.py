"""``make_loader``: any accepted kind of training data -> a ``BatchSource`` of device-resident batches.

=======================  ==========================================================================
data given               what serves it
=======================  ==========================================================================
tuple/list/dict of       ``TensorBatches``: index-tensor batching, dataset resident on the GPU when
tensors,                 it fits (the fast path); a dict gives dict batches with its keys
``TensorDataset``
a list of samples        a ``Dataset`` (below): e.g. a list of dicts, collated into dict batches
other ``Dataset``        a ``DataLoader`` shaped by a ``LoaderPolicy``, ordered by ``EpochSampler``
                         (the same permutation as the fast path, so both yield the same batches)
``IterableDataset``      a ``DataLoader`` in the dataset's own order (``shuffle=False`` required)
``DataLoader``           used as given; only its batches are moved to the device (with several
                         ranks its sampler is replaced by a ``DistributedSampler``)
=======================  ==========================================================================

With several ranks (``rank``, ``world_size``) every rank gets a disjoint share of each global batch and
the same number of batches; see ``gpulab.engines.torch.data.tensor_batches`` for the rule, shared by both
own paths.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol, runtime_checkable

import psutil
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    TensorDataset,
)

from gpulab.engines.torch.data import loader_rng, resume_skip
from gpulab.engines.torch.data.collate import collate
from gpulab.engines.torch.data.prefetch import DevicePrefetcher
from gpulab.engines.torch.data.streams import shards_by_worker
from gpulab.engines.torch.data.tensor_batches import (
    CursorSource,
    EpochCursor,
    TensorBatches,
    check_batch_size,
    check_rank,
    epoch_permutation,
    len_or_none,
    num_batches,
    rank_span,
    resident_copy_bytes,
)
from gpulab.engines.torch.data.transfer import DeviceLike, is_dataclass_instance, is_on_device, resolve_device
from gpulab.engines.torch.devices import accelerator
from gpulab.errors import CheckpointError, ConfigError, DataError

ACCEPTED = "a tuple/list/dict of tensors, a TensorDataset, a Dataset, a list of samples, or a DataLoader"


@runtime_checkable
class BatchSource(Protocol):
    """What every loader from ``make_loader`` offers, whatever data it was built from.

    - ``iter(source)``: this epoch's remaining batches, already on the target device. Finishing an epoch
      moves to the next one, so iterating again reshuffles even without ``set_epoch``.
    - ``len(source)``: batches in a full epoch.
    - ``set_epoch(epoch)``: go to the start of ``epoch`` (kept in place if already inside it, so a loop
      calling it every epoch resumes mid-epoch after ``load_state_dict``).
    - ``state_dict()`` -> ``{"epoch": int, "batches_consumed": int, ...}``: the next batch to produce (a
      user's ``DataLoader`` adds the random state its epoch was drawn from, ``loader_rng``); a batch
      counts as consumed once yielded. ``load_state_dict(state)`` goes back there, also on a fresh object.
    """

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...

    def state_dict(self) -> dict[str, int]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class LoaderPolicy:
    """How a ``DataLoader`` feeds one device. ``for_device`` derives it from the target and the machine.

    ``resident_fraction`` caps the share of free GPU memory the fast path may fill with the dataset.
    """

    pin_memory: bool
    num_workers: int
    persistent_workers: bool
    prefetch_factor: int | None
    resident_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
        if not 0.0 < self.resident_fraction <= 1.0:
            raise ConfigError(f"resident_fraction must be in (0, 1], got {self.resident_fraction}")
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            raise ConfigError("persistent_workers and prefetch_factor need num_workers > 0")

    @classmethod
    def for_device(cls, device: DeviceLike, *, physical_cores: int | None = None) -> LoaderPolicy:
        """The policy for feeding ``device`` (a device string is enough: no GPU needed to build it).

        - pin_memory only for CUDA: pinned pages let host->device copies run asynchronously; for a CPU
          target they would only lock RAM.
        - CUDA: workers = min(8, physical cores - 1): decoding runs in parallel with the GPU, one core
          is left for the main process that launches kernels, and beyond ~8 workers the returns fade
          while memory grows with each worker's copy of the dataset.
        - CPU: no workers. The model's compute already uses every core through intra-op threads;
          workers would compete with those threads for the same cores and add inter-process copies.
          Give an explicit policy when ``__getitem__`` is expensive (decoding, augmentation).
        - persistent workers (no re-fork each epoch) and a prefetch depth of 2 batches per worker
          whenever there are workers; DataLoader rejects both without workers.
        """
        cuda = accelerator(device).pin_memory  # a GPU fed from pinned host memory
        cores = physical_cores if physical_cores is not None else usable_physical_cores()
        workers = max(0, min(8, cores - 1)) if cuda else 0
        return cls(
            pin_memory=cuda,
            num_workers=workers,
            persistent_workers=workers > 0,
            prefetch_factor=2 if workers > 0 else None,
        )

    def overridden(
        self, *, num_workers: int | None, pin_memory: bool | None, prefetch_factor: int | None
    ) -> LoaderPolicy:
        """This policy with the settings a user gave (None keeps the derived value). Workers bring
        persistent workers and a prefetch depth with them; without workers neither applies."""
        workers = self.num_workers if num_workers is None else num_workers
        depth = prefetch_factor if prefetch_factor is not None else (self.prefetch_factor or 2)
        return replace(
            self,
            num_workers=workers,
            pin_memory=self.pin_memory if pin_memory is None else pin_memory,
            persistent_workers=workers > 0,
            prefetch_factor=depth if workers > 0 else None,
        )

    def for_stream(self, data: IterableDataset) -> LoaderPolicy:
        """This policy for a stream: without workers unless ``data`` shards by worker
        (``gpulab.engines.torch.data.streams.shards_by_worker``); every worker would otherwise yield the whole
        stream. Says so in one warning per dataset class when it drops the workers."""
        if self.num_workers == 0 or shards_by_worker(data):
            return self
        name = type(data).__name__
        if name not in _WARNED_STREAMS:
            _WARNED_STREAMS.add(name)
            warnings.warn(
                f"the IterableDataset {name} does not split itself by torch.utils.data.get_worker_info(), "
                f"so each of {self.num_workers} DataLoader workers would yield all of it: loading it in the "
                "main process instead; to load it in workers, shard it in __iter__ by get_worker_info() "
                f"(or set {name}.shards_by_worker = True if it already does)",
                stacklevel=4,
            )
        return replace(self, num_workers=0, persistent_workers=False, prefetch_factor=None)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The keyword arguments ``torch.utils.data.DataLoader`` takes from this policy."""
        kwargs = asdict(self)
        del kwargs["resident_fraction"]
        return kwargs


_WARNED_STREAMS: set[str] = set()  # one warning per stream class and process


def usable_physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads share a core's compute units)."""
    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):  # a container or taskset may allow fewer than the machine has
        physical = min(physical, len(os.sched_getaffinity(0)))
    return physical


class EpochSampler(Sampler[int]):
    """This rank's sample indices of one epoch, in ``epoch_permutation`` order (or in order), from its
    batch ``start`` on: batch after batch as ``rank_span`` cuts them, so a ``DataLoader`` with the same
    ``batch_size`` yields the same batches as the fast path.

    Lives in the main process even with workers, so ``set_epoch``/``start`` take effect at the next
    ``iter(DataLoader)``. Skipping by index costs nothing: skipped samples are never loaded.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool,
        seed: int,
        batch_size: int = 1,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.num_samples, self.shuffle, self.seed = num_samples, shuffle, seed
        self.batch_size, self.drop_last = batch_size, drop_last
        self.rank, self.world_size = check_rank(rank, world_size)
        self.epoch = 0
        self.start = 0  # in batches

    def _positions(self) -> Iterator[int]:
        total = num_batches(self.num_samples, self.batch_size, self.drop_last, self.world_size)
        for index in range(self.start, total):
            span = rank_span(index, self.num_samples, self.batch_size, self.rank, self.world_size)
            for position in span:
                yield position % self.num_samples

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return self._positions()
        order = epoch_permutation(self.num_samples, self.seed, self.epoch).tolist()
        return (order[p] for p in self._positions())

    def __len__(self) -> int:
        total = num_batches(self.num_samples, self.batch_size, self.drop_last, self.world_size)
        return sum(
            len(rank_span(i, self.num_samples, self.batch_size, self.rank, self.world_size))
            for i in range(self.start, total)
        )


class DatasetBatches(CursorSource):
    """A map-style ``Dataset`` through a ``DataLoader`` with an ``EpochSampler``: resumes by index."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        device: DeviceLike,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        policy: LoaderPolicy,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.batch_size, self.drop_last = check_batch_size(batch_size), drop_last
        self.device = resolve_device(device)
        self.num_samples = len(dataset)  # type: ignore[arg-type]
        self.world_size = world_size
        self.sampler = EpochSampler(
            self.num_samples,
            shuffle=shuffle,
            seed=seed,
            batch_size=batch_size,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
        )
        # The generator only seeds workers' RNGs (random augmentations); the order comes from the sampler.
        self.loader = DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(seed),
            collate_fn=collate,  # dataclass samples too
            **policy.dataloader_kwargs(),
        )
        self._cursor = EpochCursor()

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.drop_last, self.world_size)

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self._cursor.epoch, self._cursor.consumed
        self.sampler.epoch, self.sampler.start = epoch, start
        batches = DevicePrefetcher(self.loader, self.device)
        return self._cursor.track(batches, epoch, start, len(self))


class LoaderBatches(CursorSource):
    """A user's own ``DataLoader``, used as given; batches are moved to the device.

    Resumes exactly (``loader_rng``): the state of every generator the loader draws from is kept as each
    epoch's iterator is made and saved with the cursor; a resume puts it back and takes the consumed
    batches again (an arbitrary sampler cannot be told where to start), so a shuffling loader -- with
    or without its own ``generator``, with workers -- lands on the same batches. A sampler or dataset
    with ``set_epoch`` (``DistributedSampler``) is told the epoch; a dataset with a generator of its own
    that nothing reseeds is one warning line at the first checkpoint. ``len()`` raises ``TypeError`` when the
    loader has no length (an ``IterableDataset`` without one).

    ``resume_data: skip`` takes the consumed batches' indices from the sampler instead, loading none
    (``resume_skip``; a map-style dataset only). A loader that keeps its own state (torchdata's
    ``StatefulDataLoader``: ``state_dict`` / ``load_state_dict``) is taken as it is: its state travels with
    the cursor and it resumes itself; its batches are then taken one at a time (no copy ahead on CUDA), so
    its state is always that of the batches handed out.
    """

    def __init__(self, loader: DataLoader, device: DeviceLike, resume_data: str = "replay") -> None:
        self.loader = loader
        self.device = resolve_device(device)
        self._cursor = EpochCursor()
        self._epoch_rng: dict[str, Any] | None = None  # as this epoch's iterator was made
        self._resume_rng: dict[str, Any] | None = None  # from a checkpoint, for the next iterator
        self._warned = False
        self.stateful = keeps_own_state(loader)
        self._loader_state: Any = None  # a stateful loader's own, from a checkpoint
        if resume_data == "skip" and not self.stateful:
            resume_skip.check_skippable(loader)
        self.resume_data = resume_data

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self._cursor.epoch, self._cursor.consumed
        loader_rng.set_epoch(self.loader, epoch)  # e.g. DistributedSampler reshuffles per epoch
        if self.stateful:
            own, self._loader_state = self._loader_state, None
            if own is not None:
                self.loader.load_state_dict(own)  # it continues where the checkpoint's loader stood
            batches = DevicePrefetcher(self.loader, self.device, lookahead=False)
            return self._cursor.track(batches, epoch, start, len_or_none(self))
        saved, self._resume_rng = self._resume_rng, None
        self._epoch_rng = saved if saved is not None else loader_rng.capture(self.loader)
        if self.resume_data == "skip" and saved is not None and start > 0:
            raw = resume_skip.skip(self.loader, start, saved, epoch)
        else:
            raw = loader_rng.replay(self.loader, start, saved, epoch)
        batches = DevicePrefetcher(raw, self.device)
        return self._cursor.track(batches, epoch, start, len_or_none(self))

    def state_dict(self) -> dict[str, Any]:
        """The cursor, and the random state its epoch began from (for the next epoch: the state now); a
        stateful loader's own state instead."""
        state: dict[str, Any] = self._cursor.state_dict()
        if self.stateful:
            return {**state, "loader": self.loader.state_dict()}
        if not self._warned:  # the first checkpoint says what it cannot hold
            self._warned = True
            loader_rng.warn_opaque(self.loader)
        mid_epoch = state["batches_consumed"] > 0 and self._epoch_rng is not None
        return {**state, "rng": self._epoch_rng if mid_epoch else loader_rng.capture(self.loader)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._cursor.load_state_dict(state, len_or_none(self))
        if self.stateful:
            if state.get("loader") is None:
                raise CheckpointError(
                    f"the checkpoint holds no state of the {type(self.loader).__name__} given: it was "
                    "written with another DataLoader; resume with the DataLoader the run was started with"
                )
            self._loader_state = state["loader"]
            return
        rng = state.get("rng")  # absent in a checkpoint from before it was kept
        self._resume_rng = loader_rng.check(self.loader, rng) if rng is not None else None


def keeps_own_state(loader: DataLoader) -> bool:
    """A loader that saves and restores its own position (torchdata's ``StatefulDataLoader``)."""
    return callable(getattr(loader, "state_dict", None)) and callable(
        getattr(loader, "load_state_dict", None)
    )


def make_loader(
    data: Any,
    *,
    batch_size: int,
    device: DeviceLike,
    shuffle: bool = True,
    drop_last: bool = False,
    seed: int = 0,
    policy: LoaderPolicy | None = None,
    rank: int = 0,
    world_size: int = 1,
    resume_data: str = "replay",
) -> BatchSource:
    """A ``BatchSource`` of ``data`` on ``device``; see the module docstring for what serves which input.

    ``seed`` and the epoch fix the order (``seed + epoch`` seeds the permutation). ``policy`` defaults to
    ``LoaderPolicy.for_device(device)``. A ``DataLoader`` given keeps its own batch size, order and
    workers: the other arguments do not apply to it, except that with ``world_size > 1`` its sampler
    becomes a ``DistributedSampler`` (seeded with ``seed``) so each rank loads its own share.
    ``batch_size`` is per rank. ``resume_data`` (replay|skip): how a DataLoader's (or a stream's) resumed
    epoch reaches its batch (``LoaderBatches``); tensors and a Dataset resume by index always.
    """
    policy = policy if policy is not None else LoaderPolicy.for_device(device)
    check_rank(rank, world_size)
    shard = {"rank": rank, "world_size": world_size}
    if isinstance(data, DataLoader):
        return LoaderBatches(distributed_loader(data, rank, world_size, seed), device, resume_data)
    if is_sample_list(data):  # a list indexes like a Dataset: the DataLoader collates its samples
        data = _SampleList(data)
    data = whole_fields(data)
    tensors = as_tensors(data)
    if tensors is not None:
        return TensorBatches(
            tensors,
            keys=list(data) if isinstance(data, Mapping) else None,
            batch_size=batch_size,
            device=device,
            shuffle=shuffle,
            drop_last=drop_last,
            seed=seed,
            resident_fraction=policy.resident_fraction,
            **shard,
        )
    if isinstance(data, IterableDataset):
        _warn_unsharded(data, rank, world_size)
        return _iterable_loader(data, batch_size, device, shuffle, drop_last, policy, resume_data)
    if isinstance(data, Dataset):
        return DatasetBatches(
            data,
            batch_size=batch_size,
            device=device,
            shuffle=shuffle,
            drop_last=drop_last,
            seed=seed,
            policy=policy,
            **shard,
        )
    hint = " (wrap a single tensor as a one-element tuple: (x,))" if isinstance(data, torch.Tensor) else ""
    raise DataError(f"cannot load training data of type {type(data).__name__}; give {ACCEPTED}{hint}")


def distributed_loader(loader: DataLoader, rank: int, world_size: int, seed: int) -> DataLoader:
    """``loader`` rebuilt around a ``DistributedSampler`` for this rank (``loader`` itself if one process,
    if it already shards, or if its batching cannot be rebuilt -- then with a warning).

    The ``DistributedSampler`` pads (``drop_last=False``) or trims (``drop_last=True``, from the loader)
    so every rank gets the same number of samples and hence of batches; ``LoaderBatches`` calls its
    ``set_epoch`` every epoch, so each epoch reshuffles.
    """
    if world_size == 1 or isinstance(loader.sampler, DistributedSampler):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        _warn_unsharded(loader.dataset, rank, world_size)
        return loader
    if type(loader.batch_sampler) is not BatchSampler or loader.batch_size is None:
        warnings.warn(
            f"the DataLoader's {type(loader.batch_sampler).__name__} is used as given on each of "
            f"{world_size} ranks: make it yield a disjoint share per rank, with the same number of batches",
            stacklevel=3,
        )
        return loader
    sampler = DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=isinstance(loader.sampler, RandomSampler),
        seed=seed,
        drop_last=loader.drop_last,
    )
    rebuilt = type(loader) if keeps_own_state(loader) else DataLoader  # a StatefulDataLoader stays one
    return rebuilt(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
    )


def _warn_unsharded(data: IterableDataset, rank: int, world_size: int) -> None:
    """Rank 0 reminds once: the loader cannot split a stream between ranks, the dataset must."""
    if world_size > 1 and rank == 0:
        warnings.warn(
            f"an IterableDataset ({type(data).__name__}) decides its own order, so each of {world_size} "
            "ranks gets what its __iter__ yields: shard it by torch.distributed.get_rank() there, or every "
            "rank trains on the same samples (the Trainer stops all ranks when the first one runs out)",
            stacklevel=3,
        )


@dataclass(frozen=True)
class LoaderMemory:
    """What ``make_loader``'s source holds on the device beside the step's batch: ``resident_bytes`` for
    the whole run (the fast path's dataset copy and epoch copy), ``batches_ahead`` batches in flight (the
    prefetcher copies the next batch while the step runs)."""

    resident_bytes: int = 0
    batches_ahead: int = 0


def loader_memory(
    data: Any, device: DeviceLike, *, shuffle: bool = True, policy: LoaderPolicy | None = None
) -> LoaderMemory:
    """``LoaderMemory`` of the source ``make_loader(data, device=device, shuffle=shuffle)`` would build,
    without building it (nothing is copied)."""
    policy = policy if policy is not None else LoaderPolicy.for_device(device)
    tensors = None if isinstance(data, DataLoader) or is_sample_list(data) else as_tensors(data)
    resident = 0
    if tensors is not None and tensors and all(isinstance(t, torch.Tensor) for t in tensors):
        resident = resident_copy_bytes(tensors, device, shuffle, policy.resident_fraction)
        if resident or is_on_device(tensors, device):
            return LoaderMemory(resident, 0)  # batches are views of what is resident: none in flight
    return LoaderMemory(resident, 1 if accelerator(device).streams else 0)


def as_tensors(data: Any) -> tuple[torch.Tensor, ...] | None:
    """The tensors behind ``data`` when it takes the fast path, else None. NumPy arrays become tensors
    sharing their memory (``torch.from_numpy``), as the TensorFlow engine takes them."""
    if isinstance(data, TensorDataset):
        return tuple(data.tensors)
    if isinstance(data, (tuple, list)):
        return tuple(map(_from_numpy, data))  # TensorBatches checks they are equal-length tensors
    if isinstance(data, Mapping):  # the fast path for a dict of tensors: {"input_ids": ..., "labels": ...}
        return tuple(map(_from_numpy, data.values()))
    return None


def whole_fields(data: Any) -> Any:
    """A dataclass instance holding whole tensors or arrays as the dict of its fields that are set (the
    model is called alike with both: ``runtime/step_call.py``); any other ``data`` as it is."""
    if not is_dataclass_instance(data):
        return data
    fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}
    return {name: value for name, value in fields.items() if value is not None}


def _from_numpy(item: Any) -> Any:
    """A NumPy array as a tensor on its memory; anything else as it is (TensorBatches names it)."""
    return torch.from_numpy(item) if type(item).__module__ == "numpy" and hasattr(item, "__array__") else item


def is_sample_list(data: Any) -> bool:
    """A list of samples (dicts, tuples), not of whole tensors: the fast path takes the latter."""
    return isinstance(data, list) and bool(data) and isinstance(data[0], (Mapping, tuple, list))


class _SampleList(Dataset):
    """A list of samples as a map-style ``Dataset``."""

    def __init__(self, samples: list[Any]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        return self.samples[index]


def _iterable_loader(
    data: IterableDataset,
    batch_size: int,
    device: DeviceLike,
    shuffle: bool,
    drop_last: bool,
    policy: LoaderPolicy,
    resume_data: str = "replay",
) -> LoaderBatches:
    """An ``IterableDataset`` decides its own order; with workers it must shard by ``get_worker_info()``
    or each worker yields every sample, so a stream that does not is loaded without workers."""
    if shuffle:
        raise DataError(
            f"an IterableDataset ({type(data).__name__}) cannot be shuffled by the loader; "
            "pass shuffle=False and shuffle inside the dataset"
        )
    batch_size = check_batch_size(batch_size)
    policy = policy.for_stream(data)
    loader = DataLoader(data, batch_size=batch_size, drop_last=drop_last, **policy.dataloader_kwargs())
    return LoaderBatches(loader, device, resume_data)
