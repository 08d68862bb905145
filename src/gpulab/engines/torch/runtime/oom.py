"""Out-of-memory recovery for ``micro_batch: auto``: halve the micro-batch, double the accumulation, redo.

``OomGuard.run(step)`` calls ``step(micro_batch, accumulate)`` -- the forward and backward of every
micro-batch of one optimizer step -- and catches ``torch.OutOfMemoryError`` (nothing else: any other
error passes through untouched). All ranks then agree with one small all-reduce (max of an "I ran out"
flag), so that when any rank ran out, *every* rank clears its gradients, releases cached memory, halves
its micro-batch and doubles its accumulation, and redoes the same step on the same data. The effective
batch (micro-batch x accumulation) does not change, so neither does the training trajectory (up to
floating-point summation order). At micro-batch 1 there is nothing left to halve: every rank stops with
``MicroBatchOomError``, one clear line.

What the caller must keep (the guard cannot check it):

- ``step`` may be called again for the same data: it must not count losses or samples, nor step the
  optimizer. Do those after ``run`` returns. Halving only shrinks activations, so the optimizer step
  is outside the guard anyway: an optimizer that does not fit does not fit at any micro-batch.
- With several ranks, ``step`` must run **no collective** another rank could miss. A rank that ran out
  in its first micro-batch never reaches DDP's gradient all-reduce in the last backward, so the others
  would wait there forever. Run every micro-batch under ``no_sync`` and reduce the gradients after the
  agreement, with ``sync_gradients`` (one flat all-reduce). The cost: the gradient all-reduce no longer
  overlaps the backward pass -- paid only with ``micro_batch: auto``.

For tests, ``inject_oom_at`` (or ``GPULAB_INJECT_OOM=RANK:ATTEMPT[,RANK:ATTEMPT...]``) raises an
out-of-memory error on this rank after the step's work, at the given attempts (counted from 0 over the
guard's life): the worst moment, with every micro-batch's gradients accumulated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch

from gpulab.engines.torch.data.transfer import batch_size_of, map_tensors
from gpulab.engines.torch.runtime.memory import release_cached_memory
from gpulab.errors import ConfigError, GpulabError
from gpulab.hooks import hook

T = TypeVar("T")
AllReduce = Callable[[torch.Tensor, str], torch.Tensor]
INJECT_ENV = "GPULAB_INJECT_OOM"


class MicroBatchOomError(GpulabError):
    """Out of memory even at micro-batch 1."""


@dataclass(frozen=True)
class OomEvent:
    """One recovery: the attempt that ran out, and the split before and after."""

    attempt: int
    ranks_out_of_memory: int
    micro_batch_before: int
    accumulate_before: int
    micro_batch: int
    accumulate: int


class OomGuard:
    """Runs a step, and on an out-of-memory error anywhere halves the micro-batch everywhere and redoes it.

    ``batch_size`` is the effective batch per rank (micro-batch x accumulation; it never changes),
    ``accumulate`` the initial number of micro-batches. ``all_reduce(tensor, op)`` combines across ranks
    (``Runtime.all_reduce``); None for one process. ``device`` is where the agreement flag lives (NCCL
    needs it on the GPU) and whose cache is released.
    """

    def __init__(
        self,
        batch_size: int,
        accumulate: int = 1,
        *,
        device: torch.device | str = "cpu",
        all_reduce: AllReduce | None = None,
        rank: int = 0,
        inject_oom_at: Collection[int] | None = None,
    ) -> None:
        if batch_size < 1 or accumulate < 1 or accumulate > batch_size:
            raise ConfigError(
                f"need 1 <= accumulate <= batch_size, got batch_size={batch_size}, accumulate={accumulate}"
            )
        self.batch_size = batch_size
        self.accumulate = accumulate
        self.device = torch.device(device)
        self.all_reduce = all_reduce
        self.rank = rank
        self.inject_oom_at = set(inject_oom_at if inject_oom_at is not None else injected_attempts(rank))
        self.attempts = 0
        self.events: list[OomEvent] = []

    @property
    def micro_batch(self) -> int:
        """Samples in the largest micro-batch (the batch splits into ``accumulate`` near-equal parts)."""
        return math.ceil(self.batch_size / self.accumulate)

    def run(self, step: Callable[[int, int], T], *, clear_grads: Callable[[], None]) -> T:
        """``step(micro_batch, accumulate)`` until it runs on every rank; returns its result.

        ``clear_grads`` drops the partial gradients of a failed attempt
        (``optimizer.zero_grad(set_to_none=True)``).
        """
        while True:
            attempt = self.attempts
            self.attempts += 1
            result, ran_out = self._attempt(step, attempt)
            count = self._agree(ran_out)
            if count == 0:
                return result
            del result
            clear_grads()
            release_cached_memory(self.device)
            self._shrink(attempt, count)

    def _attempt(self, step: Callable[[int, int], T], attempt: int) -> tuple[T | None, bool]:
        try:
            result = step(self.micro_batch, self.accumulate)
            if attempt in self.inject_oom_at:
                raise torch.OutOfMemoryError(
                    f"injected out-of-memory error (rank {self.rank}, attempt {attempt})"
                )
            return result, False
        except torch.OutOfMemoryError:
            # Returning (instead of handling inside ``except``) drops the traceback, whose frames hold
            # the failed step's tensors; the memory is free before the retry.
            return None, True

    def _agree(self, ran_out: bool) -> int:
        """How many ranks ran out (every rank gets the same answer)."""
        if self.all_reduce is None:
            return int(ran_out)
        flag = torch.tensor([1.0 if ran_out else 0.0], device=self.device)
        return int(round(float(self.all_reduce(flag, "sum").item())))

    def _shrink(self, attempt: int, count: int) -> None:
        before = (self.micro_batch, self.accumulate)
        if self.micro_batch <= 1:
            raise MicroBatchOomError(
                f"out of memory even at micro-batch 1 ({count} rank(s) ran out, effective batch "
                f"{self.batch_size} per rank): use bf16-mixed, activation checkpointing, FSDP, or a "
                "smaller model or sequence length"
            )
        self.accumulate = min(self.batch_size, self.accumulate * 2)
        self.events.append(OomEvent(attempt, count, *before, self.micro_batch, self.accumulate))

    def summary(self) -> dict[str, Any]:
        """For ``summary.json``: the split in force and every recovery."""
        return {
            "micro_batch": self.micro_batch,
            "accumulate": self.accumulate,
            "oom_recoveries": [asdict(e) for e in self.events],
        }


def split_batch(batch: Any, parts: int) -> list[tuple[Any, float]]:
    """``batch`` (a tuple, dict or any nesting of tensors sharing dim 0) in ``parts`` near-equal
    micro-batches of the same structure, each with its weight (its share of the samples): the sum of
    ``weight * mean loss`` over the parts equals the mean loss of the whole batch, whatever the split."""
    rows = batch_size_of(batch)
    parts = max(1, min(parts, rows))
    micro = [map_tensors(lambda t, i=i: torch.tensor_split(t, parts, dim=0)[i], batch) for i in range(parts)]
    return [(m, batch_size_of(m) / rows) for m in micro]


def sync_gradients(params: Iterable[torch.nn.Parameter], all_reduce: AllReduce | None) -> None:
    """Average gradients over ranks with one flat all-reduce per dtype (after ``no_sync`` micro-batches)."""
    if all_reduce is None:
        return
    grads: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            grads.setdefault((p.grad.dtype, p.grad.device), []).append(p.grad)
    for group in grads.values():
        flat = torch.cat([g.reshape(-1) for g in group])
        flat = all_reduce(flat, "mean")
        offset = 0
        for g in group:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


def injected_attempts(rank: int, environ: dict[str, str] | None = None) -> set[int]:
    """Attempts at which ``GPULAB_INJECT_OOM`` asks this rank to raise, e.g. ``"1:0,1:3"``."""
    # read only when tests ask for hooks (gpulab/hooks.py); a given ``environ`` is read as it is
    value = ((hook(INJECT_ENV) if environ is None else environ.get(INJECT_ENV)) or "").strip()
    attempts: set[int] = set()
    for item in filter(None, (part.strip() for part in value.split(","))):
        who, sep, when = item.partition(":")
        if not sep or not who.isdigit() or not when.isdigit():
            raise ConfigError(
                f"{INJECT_ENV}={value!r}: expected RANK:ATTEMPT[,RANK:ATTEMPT...]; fix the value or unset it"
            )
        if int(who) == rank:
            attempts.add(int(when))
    return attempts
