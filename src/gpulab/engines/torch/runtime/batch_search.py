"""Find the largest batch that really runs: ``find_batch_size`` grows then bisects with real trial steps,
agreed across ranks; ``search_batch_size`` is the Trainer's ``batch_size: auto`` (it starts from
``memory_estimate.estimate_memory`` and searches under the device's memory limit).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil
import torch
from torch import nn

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.memory import memory_limit_bytes, release_cached_memory
from gpulab.engines.torch.runtime.memory_estimate import (
    AllReduce,
    LiveBytes,
    LossFn,
    StepFn,
    _all_tensors,
    _take,
    estimate_memory,
    num_rows,
    tensor_bytes,
)
from gpulab.engines.torch.torch_private import tree_flatten, tree_map
from gpulab.errors import ConfigError, GpulabError


@dataclass
class BatchTrial:
    batch_size: int
    fits: bool
    peak_bytes: int | None  # measured; None after an out-of-memory error
    why: str = ""


@dataclass
class BatchSearch:
    """The outcome of ``find_batch_size``: the batch chosen, the limit, every trial in order."""

    batch_size: int
    limit_bytes: int | None
    trials: list[BatchTrial] = field(default_factory=list)
    start: int = 1
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class BatchSizeError(GpulabError):
    """Not even the smallest batch fits."""


def find_batch_size(
    try_step: Callable[[int], int | None],
    *,
    device: torch.device | str,
    limit_bytes: int | None = None,
    start: int = 1,
    high: int | None = None,
    all_reduce: AllReduce | None = None,
    growth: float = 2.0,
) -> BatchSearch:
    """The largest batch size in ``[1, high]`` whose real step fits, found by growing then bisecting.

    ``try_step(b)`` runs one real training step at batch ``b`` and returns the peak bytes it used (or
    None where it cannot tell); a ``torch.OutOfMemoryError`` means it does not fit. A step also fails
    when its peak exceeds ``limit_bytes``, which defaults to the limit set with ``set_memory_limit`` for
    ``device`` (on CUDA that limit is also enforced by the allocator, so an oversize step raises). With
    several processes ``all_reduce(flag, "min")`` makes every rank take the same decision at every
    trial: a batch fits only if it fits everywhere. ``start`` (e.g. from ``MemoryEstimate.max_batch_size``)
    is where the search begins; ``high`` caps it (the dataset size, say). From ``start`` the batch grows
    by ``growth`` (doubling by default; less when ``start`` is a good guess) until a step fails, then the
    gap is bisected.
    """
    if growth <= 1.0:
        raise ConfigError(f"growth must be above 1, got {growth}")
    device = torch.device(device)
    limit = limit_bytes if limit_bytes is not None else memory_limit_bytes(device)
    high = high if high is not None else 1 << 20
    if high < 1:
        raise ConfigError(f"the largest batch to try must be at least 1, got {high}")
    start = min(max(1, start), high)
    search = BatchSearch(batch_size=0, limit_bytes=limit, start=start)

    def fits(b: int) -> bool:
        trial = _trial(try_step, b, limit, device)
        agreed = _agree(trial.fits, device, all_reduce)
        if trial.fits and not agreed:
            trial.why = "does not fit on another rank"
        trial.fits = agreed
        search.trials.append(trial)
        return agreed

    good, bad = 0, None
    b = start
    # Grow from the start until a step fails (or the cap is reached) ...
    while True:
        if fits(b):
            good = b
            if b >= high:
                break
            b = min(max(b + 1, int(b * growth)), high)
        else:
            bad = b
            break
    # ... falling back below the start if it already failed ...
    if good == 0:
        b = bad // 2
        while b >= 1 and not fits(b):
            bad, b = b, b // 2
        if b < 1:
            raise BatchSizeError(_nothing_fits(search, device))
        good = b
    # ... then bisect between the last fit and the first failure.
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    search.batch_size = good
    search.reason = (
        f"largest batch in 1..{high} whose step stays under {_mib(limit)}"
        if limit is not None
        else f"largest batch in 1..{high} that runs without running out of memory"
    )
    return search


def _trial(try_step: Callable[[int], int | None], b: int, limit: int | None, device) -> BatchTrial:
    try:
        peak, ran_out = try_step(b), False
    except torch.OutOfMemoryError as exc:
        # The traceback's frames hold the failed step's tensors: clear them, and release the cache only
        # once the ``except`` block (and with it the exception) is gone, or nothing is freed to release.
        traceback.clear_frames(exc.__traceback__)
        peak, ran_out = None, True
    if ran_out:
        release_cached_memory(device)
        return BatchTrial(b, False, None, "out of memory")
    if limit is not None and peak is not None and peak > limit:
        return BatchTrial(b, False, peak, f"peak {_mib(peak)} over the limit {_mib(limit)}")
    return BatchTrial(b, True, peak)


def _agree(flag: bool, device: torch.device, all_reduce: AllReduce | None) -> bool:
    if all_reduce is None:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce(value, "min").item() > 0.5)


def _nothing_fits(search: BatchSearch, device: torch.device) -> str:
    last = search.trials[-1] if search.trials else None
    why = f" ({last.why})" if last and last.why else ""
    return (
        f"not even a batch of 1 fits on {device}{why}: use bf16-mixed, activation checkpointing, "
        "a smaller model or sequence, FSDP, or raise the memory limit"
    )


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


class TrialStep:
    """``try_step`` for ``find_batch_size``: a real training step at a given batch size.

    Batches are the first ``b`` samples of ``data`` (a tuple of tensors, a TensorDataset or a map-style
    Dataset; rows repeat when ``b`` exceeds it). The model, optimizer and RNG state are restored after
    each trial, so the search leaves no trace on training. The peak returned is, on CUDA, the
    allocator's peak (everything on the device); elsewhere the bytes resident before the step
    (parameters, buffers, optimizer state, the batch) plus the most the step added, counted per tensor
    by ``LiveBytes`` -- the CPU counterpart of the allocator's figure, without the process's own RSS.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: LossFn,
        data: Any,
        *,
        device: torch.device | str,
        autocast: Callable[[], AbstractContextManager] = nullcontext,
        backward: Callable[[torch.Tensor], None] | None = None,
        no_sync: Callable[[nn.Module], AbstractContextManager] | None = None,
        step: StepFn | None = None,
    ) -> None:
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.step = step  # (forward, batch) -> loss: any batch (a dict's keys by name); None: a tuple
        self.device = torch.device(device)
        self.autocast = autocast
        self.backward = backward or (lambda loss: loss.backward())
        self.no_sync = no_sync or (lambda model: nullcontext())
        self.data = data

    def __call__(self, batch_size: int) -> int | None:
        batch = tree_map(lambda t: t.to(self.device), _take(self.data, batch_size))
        saved = _snapshot(self.model, self.optimizer)
        acc = accelerator(self.device)
        try:
            with torch.random.fork_rng(devices=acc.rng_devices()):
                if acc.allocator_peaks:  # the allocator counts the step's tensors itself
                    acc.synchronize()
                    acc.reset_peak_memory()
                    self._step(batch)
                    acc.synchronize()
                    return acc.peak_memory_bytes()
                batch_tensors = [t for t in tree_flatten(batch)[0] if isinstance(t, torch.Tensor)]
                resident = _resident_bytes(self.model, self.optimizer) + tensor_bytes(batch_tensors)
                ignore = [*_all_tensors(self.optimizer), *self.model.buffers(), *batch_tensors]
                with LiveBytes(ignore) as tracker:
                    self._step(batch)
                return resident + tracker.peak
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            _restore(self.model, self.optimizer, saved)

    def _step(self, batch) -> None:
        # Two steps when the optimizer has no state yet: the first allocates it after backward, so only
        # the second shows the steady state (state alive during forward and backward).
        self.model.train()
        for _ in range(1 if self.optimizer.state else 2):
            # No gradient all-reduce: a rank running out of memory mid-backward would leave the others
            # waiting in it. The trial measures memory, not gradients.
            with self.no_sync(self.model):
                with self.autocast():
                    if self.step is not None:
                        loss = self.step(self.model, batch)
                    else:
                        loss = self.loss_fn(self.model(*batch[:-1]), batch[-1])
                self.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            del loss


def _resident_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    return tensor_bytes([*model.parameters(), *model.buffers(), *_all_tensors(optimizer)])


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    # On the CPU: a trial at the limit must not double the device's memory with a copy.
    cpu = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    return cpu, _to_cpu(optimizer.state_dict())


def _restore(model: nn.Module, optimizer: torch.optim.Optimizer, saved: tuple[dict, dict]) -> None:
    model.load_state_dict(saved[0])
    optimizer.load_state_dict(saved[1])


def _to_cpu(obj: Any) -> Any:
    return tree_map(lambda t: t.detach().to("cpu", copy=True) if isinstance(t, torch.Tensor) else t, obj)


def default_cpu_limit() -> int:
    """Half the RAM available now: what ``search_batch_size`` aims under on a CPU without a set limit."""
    return int(psutil.virtual_memory().available // 2)


def search_batch_size(
    runtime: Any,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    data: Any,
    *,
    limit_bytes: int | None = None,
    high: int | None = None,
    step: StepFn | None = None,
) -> BatchSearch:
    """``find_batch_size`` wired to a ``Runtime`` (its autocast, backward and ``all_reduce``): what
    ``gpulab train --batch-size auto`` runs after ``runtime.setup``.

    The search starts at the estimate's prediction and is capped by the samples each rank has. On a CPU
    without a limit set (``set_memory_limit``) it aims under half the RAM available now. ``step(forward,
    batch) -> loss`` is the caller's rule for a batch (the Trainer's, which calls a model with a dict's
    keys); without it batches are ``(inputs..., target)``.
    """
    if step is None and _gives_dicts(data):
        raise ConfigError(
            "batch_size: auto traces (inputs..., target) batches only; with dict batches give batch_size a "
            "number (e.g. --batch-size 32)"
        )
    device = runtime.device
    limit = limit_bytes if limit_bytes is not None else memory_limit_bytes(device)
    if limit is None and accelerator(device).is_host:
        limit = default_cpu_limit()
    rows = num_rows(data)
    cap = high or (max(1, rows // runtime.world_size) if rows else None)
    start, growth = 1, 2.0
    if limit is not None:
        try:
            start = predict_max_batch_size(
                model, optimizer, runtime.precision, data, loss_fn, limit, step=step
            )
            start, growth = max(1, min(start, cap or start)), 1.125
        except Exception:  # the estimate only picks the start; the real steps decide
            start, growth = 1, 2.0
    if runtime.world_size > 1:  # every rank must try the same sizes in the same order
        agreed = runtime.all_reduce(
            torch.tensor([start, limit or 0], dtype=torch.float64, device=device), "min"
        )
        start, limit = int(agreed[0].item()), (int(agreed[1].item()) or None) if limit is not None else None
    step = TrialStep(
        model,
        optimizer,
        loss_fn,
        data,
        device=device,
        autocast=runtime.autocast,
        backward=runtime.backward,
        no_sync=runtime.no_sync if runtime.world_size > 1 else None,
        step=step,
    )
    return find_batch_size(
        step,
        device=device,
        limit_bytes=limit,
        start=start,
        high=cap,
        all_reduce=runtime.all_reduce,
        growth=growth,
    )


def predict_max_batch_size(
    model: nn.Module,
    optimizer: Any,
    precision: Any,
    data: Any,
    loss_fn: LossFn,
    limit_bytes: int,
    *,
    tolerance: float = 1 / 32,
    step: StepFn | None = None,
) -> int:
    """The largest batch the estimate says fits under ``limit_bytes`` (to ``tolerance``; 0 if none).

    The peak is a maximum over the moments of a step, each affine in the batch, so it is convex and
    piecewise linear: a line through two small batches can miss it at a large one. So the line only
    gives the first guess, and the answer is bracketed and bisected with estimates traced at each
    candidate (fake tensors: nothing is allocated, whatever the batch).
    """
    example = _take(data, 1)

    def fits(b: int) -> bool:
        estimate = estimate_memory(
            model, optimizer, precision, example, loss_fn=loss_fn, batch_size=b, step=step
        )
        return estimate.predicted_peak_bytes <= limit_bytes

    guess = estimate_memory(model, optimizer, precision, example, loss_fn=loss_fn, batch_size=2, step=step)
    b = max(1, min(guess.max_batch_size(limit_bytes), 1 << 24))
    if fits(b):
        lo, hi = b, 2 * b
        while hi < 1 << 24 and fits(hi):
            lo, hi = hi, 2 * hi
    else:
        lo, hi = b // 2, b
        while lo >= 1 and not fits(lo):
            lo, hi = lo // 2, lo
        if lo < 1:
            return 0
    while hi - lo > max(1, int(lo * tolerance)):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# --------------------------------------------------------------------------------------------------------
# Batches and modules


__all__ = [
    "BatchSearch",
    "BatchSizeError",
    "BatchTrial",
    "TrialStep",
    "default_cpu_limit",
    "find_batch_size",
    "predict_max_batch_size",
    "search_batch_size",
]


def _gives_dicts(data: Any) -> bool:
    """Whether ``data``'s batches are dicts: a dict of tensors, or samples that are dicts."""
    if isinstance(data, Mapping):
        return True
    try:
        first = data[0] if len(data) else None
    except Exception:  # no indexing (a stream, a DataLoader): not ours to say here
        return False
    return isinstance(first, Mapping)
