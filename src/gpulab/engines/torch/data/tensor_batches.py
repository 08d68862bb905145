"""The fast path: batches cut from in-memory tensors by index tensors.

A ``DataLoader`` over a ``TensorDataset`` calls ``__getitem__`` once per sample and ``torch.stack``s the
results: a Python loop as long as the batch, every step. Here one ``randperm`` per epoch orders the data,
and the work per step is constant whatever the dataset or batch size: when a second copy of the data
fits, each epoch starts with one gather of the whole dataset into that epoch's order and every batch is
then a slice of it (a view: no kernel at all per step); otherwise each batch is one ``index_select`` per
tensor.

On CUDA the whole dataset is copied to the device once when it fits, and batches are cut there (as above):
no host->device copy at all per step. When it does not fit, batches are gathered on the host into pinned
memory and copied ahead on a side stream by ``DevicePrefetcher``.

The epoch cursor and permutation here are shared with the ``DataLoader`` path in ``loaders.py``, which
is what makes both paths yield the same batches in the same order for the same seed and epoch.

Several ranks (``rank``, ``world_size``) share one epoch order, drawn from the same seed on every rank.
It is cut into *global batches* of ``batch_size * world_size`` positions, and rank r takes the r-th
contiguous part of each: so the global batch of step i holds exactly the samples a single process with
``batch_size * world_size`` would see at step i, and the ranks' samples are disjoint. Every rank gets
the same number of batches, which is what keeps a collective from waiting forever for a rank that ran
out (see ``rank_span``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from gpulab.engines.torch.data.prefetch import DevicePrefetcher
from gpulab.engines.torch.data.transfer import DeviceLike, resolve_device
from gpulab.engines.torch.devices import accelerator
from gpulab.errors import CheckpointError, ConfigError, DataError

STATE_KEYS = ("epoch", "batches_consumed")


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of one epoch: a CPU int64 permutation from a generator seeded ``seed + epoch``.

    Drawn from its own generator, never the global RNG, so model initialisation or dropout cannot shift
    it and a resumed run sees the same order.
    """
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(num_samples, generator=generator)


def num_batches(num_samples: int, batch_size: int, drop_last: bool, world_size: int = 1) -> int:
    """Batches per rank in one epoch: a trailing partial global batch counts unless ``drop_last``."""
    window = batch_size * world_size
    return num_samples // window if drop_last else -(-num_samples // window)


def rank_span(index: int, num_samples: int, batch_size: int, rank: int = 0, world_size: int = 1) -> range:
    """Positions (in the epoch order) of ``rank``'s batch ``index``; positions >= ``num_samples`` wrap.

    A full global batch gives every rank ``batch_size`` positions. The last, partial one (r samples
    left) gives every rank ``ceil(r / world_size)``, *padding* with up to ``world_size - 1`` positions
    that wrap to the start of the epoch order, so all ranks step together with equal-sized batches (a
    sample or two is seen twice in such an epoch). With ``drop_last`` that partial global batch is
    dropped instead (``num_batches``). One process is the special case: no padding, a partial last batch.
    """
    lo = index * batch_size * world_size
    part = -(-min(batch_size * world_size, num_samples - lo) // world_size)
    start = lo + rank * part
    return range(start, start + part)


def check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


class EpochCursor:
    """Where a batch source stands: the epoch, and how many of its batches were already handed out.

    A batch counts as consumed the moment it is yielded, so a checkpoint written while training on it
    resumes at the next one. Handing out an epoch's last batch moves the cursor to the start of the next
    epoch, so iterating again without ``set_epoch`` reshuffles, and the state always names the next batch.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.consumed = 0

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of ``epoch``, unless already inside it (e.g. just restored from a checkpoint):
        a loop that calls ``set_epoch`` every epoch then resumes mid-epoch instead of restarting it."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch != self.epoch:
            self.epoch, self.consumed = epoch, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any], batches_per_epoch: int | None) -> None:
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"loader state lacks {', '.join(missing)}; expected {list(STATE_KEYS)}")
        epoch, consumed = state["epoch"], state["batches_consumed"]
        limit = batches_per_epoch if batches_per_epoch is not None else consumed
        valid = isinstance(epoch, int) and isinstance(consumed, int) and epoch >= 0
        if not (valid and 0 <= consumed <= limit):
            raise CheckpointError(
                f"loader state {dict(state)} does not fit this data ({batches_per_epoch} batches per epoch);"
                " was it saved with another dataset or batch size?"
            )
        self.epoch, self.consumed = epoch, consumed

    def track(self, batches: Iterable[Any], epoch: int, start: int, total: int | None) -> Iterator[Any]:
        """Yield ``batches`` (numbered from ``start`` within ``epoch``), moving the cursor as each goes."""
        index = start - 1
        for index, batch in enumerate(batches, start):
            last = total is not None and index + 1 >= total
            self.epoch, self.consumed = (epoch + 1, 0) if last else (epoch, index + 1)
            yield batch
        if self.epoch == epoch and self.consumed == index + 1:  # epoch ended (or was empty) short of `total`
            self.epoch, self.consumed = epoch + 1, 0


def len_or_none(source: Any) -> int | None:
    """``len(source)``, or None for a source of unknown length (a stream)."""
    try:
        return len(source)
    except TypeError:
        return None


class CursorSource:
    """The ``BatchSource`` methods every source with an ``EpochCursor`` shares."""

    _cursor: EpochCursor

    def set_epoch(self, epoch: int) -> None:
        self._cursor.set_epoch(epoch)

    def state_dict(self) -> dict[str, int]:
        return self._cursor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._cursor.load_state_dict(state, len_or_none(self))


class TensorBatches(CursorSource):
    """Batches of a tuple of equal-length tensors for ``device``; see the module docstring.

    ``keys``: the names of the tensors when the data was a dict of them; each batch is then a dict
    with those keys (which the Trainer passes to the model as keyword arguments).

    Implements ``BatchSource``: iterable over device-resident tuples of tensors, ``len()`` batches per
    epoch, ``set_epoch``, ``state_dict``/``load_state_dict`` for an exact mid-epoch resume.
    """

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        *,
        batch_size: int,
        device: DeviceLike,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        resident_fraction: float = 0.5,
        rank: int = 0,
        world_size: int = 1,
        keys: Sequence[str] | None = None,
    ) -> None:
        self.num_samples = check_tensors(tensors)
        self.keys = tuple(keys) if keys is not None else None
        self.batch_size = check_batch_size(batch_size)
        self.rank, self.world_size = check_rank(rank, world_size)
        self.device = resolve_device(device)
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.resident = fits_on_device(tensors, self.device, resident_fraction)
        # One copy for the whole run when resident; otherwise the data stays in host memory.
        home = self.device if self.resident else torch.device("cpu")
        self.tensors = tuple(t.to(home) for t in tensors)
        # Room for one shuffled copy per epoch, so batches become views (see the module docstring).
        self.epoch_copy = self.resident and shuffle and room_for_copy(self.tensors, resident_fraction)
        self._cursor = EpochCursor()

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.drop_last, self.world_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        epoch, start, total = self._cursor.epoch, self._cursor.consumed, len(self)
        order, tensors = self._order(epoch), self.tensors
        if self.epoch_copy:  # this epoch's order, gathered once: batches are slices of it from here on
            tensors, order = tuple(t.index_select(0, order) for t in tensors), None
        batches: Iterable[tuple[torch.Tensor, ...]]
        if (
            order is None
            and self.resident
            and self.world_size == 1
            and all(t.is_contiguous() for t in tensors)
        ):
            # The same views as _batch's slices, cut by one split per tensor: no indexing per batch.
            batches = zip(*(t.split(self.batch_size)[start:total] for t in tensors), strict=True)
        else:
            batches = (self._batch(tensors, order, i) for i in range(start, total))
        if self.keys is not None:  # one dict per batch: no copy, the same tensors under their names
            batches = (dict(zip(self.keys, batch, strict=True)) for batch in batches)
        if not self.resident:
            batches = DevicePrefetcher(batches, self.device)
        return self._cursor.track(batches, epoch, start, total)

    def _order(self, epoch: int) -> torch.Tensor | None:
        """This epoch's permutation where the data lives (one small copy per epoch), None if in order."""
        if not self.shuffle:
            return None
        return epoch_permutation(self.num_samples, self.seed, epoch).to(self.tensors[0].device)

    def _batch(
        self, tensors: tuple[torch.Tensor, ...], order: torch.Tensor | None, index: int
    ) -> tuple[torch.Tensor, ...]:
        """Batch ``index`` of ``tensors`` taken in ``order`` (None: in the order they are in)."""
        span = rank_span(index, self.num_samples, self.batch_size, self.rank, self.world_size)
        rows: slice | torch.Tensor = slice(span.start, span.stop)
        if span.stop > self.num_samples:  # padding wraps to the start of the epoch order
            wrapped = torch.arange(span.start, span.stop, device=tensors[0].device) % self.num_samples
            rows = wrapped if order is None else order[wrapped]
        elif order is not None:
            rows = order[rows]
        if self.resident:
            if isinstance(rows, slice):
                # Views, no copy; .contiguous() copies only a non-contiguous user tensor's slice (a
                # training batch's index_select is contiguous: validation's slices must be alike).
                return tuple(t[rows].contiguous() for t in tensors)
            return tuple(t.index_select(0, rows) for t in tensors)
        return tuple(_gather_pinned(t, rows) for t in tensors)


def _gather_pinned(tensor: torch.Tensor, rows: slice | torch.Tensor) -> torch.Tensor:
    """``rows`` (a slice, or an index tensor) written straight into fresh pinned host memory.

    Pinned so the prefetcher's copy is truly asynchronous. A fresh buffer each batch is cheap: the
    pinned caching allocator recycles blocks, and it only does so after the copy reading one is done.
    """
    if isinstance(rows, slice):
        source = tensor[rows]
        out = torch.empty(source.shape, dtype=tensor.dtype, pin_memory=True)
        return out.copy_(source)
    out = torch.empty((len(rows), *tensor.shape[1:]), dtype=tensor.dtype, pin_memory=True)
    return torch.index_select(tensor, 0, rows, out=out)


def check_rank(rank: int, world_size: int) -> tuple[int, int]:
    if not (
        isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size
    ):
        raise ConfigError(f"rank {rank!r} / world_size {world_size!r}: need 0 <= rank < world_size")
    return rank, world_size


def check_tensors(tensors: Sequence[Any]) -> int:
    """The common length of ``tensors``, or a ``DataError`` naming what is wrong with them."""
    if len(tensors) == 0:
        raise DataError("got an empty tuple of tensors; give at least one tensor, e.g. (inputs, targets)")
    for position, tensor in enumerate(tensors):
        if not isinstance(tensor, torch.Tensor):
            raise DataError(f"data[{position}] is a {type(tensor).__name__}, not a torch.Tensor")
        if tensor.dim() == 0:
            raise DataError(f"data[{position}] is a scalar (0-d); each tensor needs a leading sample dim")
    lengths = [t.shape[0] for t in tensors]
    if len(set(lengths)) > 1:
        raise DataError(f"tensors have different lengths {lengths} along dim 0; they need one row per sample")
    return lengths[0]


def room_for_copy(tensors: Sequence[torch.Tensor], fraction: float) -> bool:
    """Whether one more copy of ``tensors`` (all on one device) takes at most ``fraction`` of the free
    memory there: the GPU's free memory, or the host's available RAM."""
    free = _free_bytes(tensors[0].device)
    return free is not None and _nbytes(tensors) <= fraction * free


def fits_on_device(tensors: Sequence[torch.Tensor], device: torch.device, fraction: float) -> bool:
    """Whether to keep the whole dataset on ``device``: always on the CPU, and on CUDA when its bytes
    not already there are at most ``fraction`` of the free memory (the rest is for the model)."""
    free = None if accelerator(device).is_host else _free_bytes(device)
    if free is None:
        return True
    return _nbytes(t for t in tensors if t.device != device) <= fraction * free


def resident_copy_bytes(
    tensors: Sequence[torch.Tensor], device: DeviceLike, shuffle: bool, fraction: float
) -> int:
    """Bytes ``TensorBatches`` keeps on ``device`` for the whole run beside the step's own memory, decided
    as it decides them: the dataset's copy there (the part not there already) when it stays resident, and
    the epoch's shuffled copy when there is room for one (batches are views of it). ``gpulab inspect``
    adds them to the step's predicted peak."""
    device = resolve_device(device)
    if not fits_on_device(tensors, device, fraction):
        return 0  # batches are gathered per step in host memory: the step's own batch
    moved = _nbytes(t for t in tensors if t.device != device)
    free = _free_bytes(device)
    copy = _nbytes(tensors)
    room = shuffle and free is not None and copy <= fraction * (free - moved)  # free after the move
    return moved + (copy if room else 0)


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes a copy of ``tensors`` takes (their elements, not the storages they may view)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _free_bytes(device: torch.device) -> int | None:
    """Free memory for new tensors on ``device``: the GPU's, the host's available RAM; None if unknown."""
    return accelerator(device).free_bytes()
