"""What every multi-process strategy shares: the process group, the watchdog, and the collectives.

One process per device, started by torchrun/``gpulab launch``. Every collective runs inside
``self.collective(name)``, so a stall is reported by name and rank (see
``gpulab.engines.torch.distributed.watchdog``).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from gpulab.engines.torch.distributed.process_group import (
    DEFAULT_TIMEOUT_S,
    default_store,
    destroy_process_group,
    init_process_group,
    rank_device,
)
from gpulab.engines.torch.distributed.watchdog import CollectiveError, Watchdog
from gpulab.engines.torch.runtime.strategies.base import Strategy, check_reduce_op

T = TypeVar("T")
RANK_ZERO_TIMEOUT_S = 1800.0  # rank 0 writing a checkpoint may take far longer than one collective
_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}
_POLL_S = 0.05
_instances = itertools.count()


class ProcessGroupStrategy(Strategy):
    """Base of DDP and FSDP2: joins the default process group (creating it from torchrun's variables if
    needed), picks ``cuda:LOCAL_RANK`` on GPUs, and starts the stall watchdog."""

    def __init__(
        self, device: torch.device | str, *, collective_timeout_s: float = DEFAULT_TIMEOUT_S, **options: Any
    ) -> None:
        super().__init__(device, **options)
        self.collective_timeout_s = float(collective_timeout_s)
        self._group = init_process_group(self._device, self.collective_timeout_s)
        self._device = rank_device(self._device, self._group.local_rank)
        # Keys of this strategy instance only: a later fit over the same group must not read this one's
        # abort or rank-0 results. Every rank builds the same sequence of strategies, so the names agree.
        store = dist.PrefixStore(f"gpulab/strategy{next(_instances)}/", default_store())
        self.watchdog = Watchdog(
            store, self._group.rank, self._group.world_size, self.collective_timeout_s
        ).start()
        self.heartbeat = self.watchdog.heartbeat
        self._store = dist.PrefixStore("rank0/", store)
        self._rank_zero_calls = 0
        self._lagged: tuple[Callable[[], Any], torch.Tensor] | None = None  # lagged_flag: in flight

    @property
    def rank(self) -> int:
        return self._group.rank

    @property
    def local_rank(self) -> int:
        return self._group.local_rank

    @property
    def world_size(self) -> int:
        return self._group.world_size

    def collective(self, name: str, timeout_s: float | None = None) -> AbstractContextManager:
        return self.watchdog.collective(name, timeout_s)

    def all_reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        check_reduce_op(op)
        out = tensor.detach().clone()
        with self.collective(f"all_reduce({op})"):
            dist.all_reduce(out, op=_OPS[op])
        return out / self.world_size if op == "mean" else out

    def reduce_flag(self, flag: bool) -> bool:
        value = torch.tensor([1.0 if flag else 0.0], device=self.root_device)
        # The host read is inside the marked region: on NCCL the all-reduce returns at once and this
        # ``.item()`` is where a rank waits for the others.
        with self.collective("all_reduce(max) of a flag"):
            dist.all_reduce(value, op=_OPS["max"])
            return bool(value.item())

    def lagged_flag(self, flag: bool) -> bool:
        # Start this call's reduction and read the previous one's, which has had a whole step to finish:
        # no rank waits on a collective, and on a GPU the host waits only for the previous step's work.
        # Outside ``collective()``: every rank issues it at the same points, so the watchdog's counts agree.
        previous, value = self._lagged, torch.tensor([1.0 if flag else 0.0], device=self.root_device)
        work = dist.all_reduce(value, op=dist.ReduceOp.MAX, async_op=True)
        if value.is_cuda:
            work.wait()  # the current stream waits for the NCCL stream; the host does not
            host = torch.empty(1, pin_memory=True)
            host.copy_(value, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            self._lagged = (done.synchronize, host)
        else:
            self._lagged = (work.wait, value)
        if previous is None:
            return False
        wait, result = previous
        wait()
        return bool(result[0] > 0)

    def barrier(self, name: str = "barrier") -> None:
        with self.collective(name):
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        with self.collective(f"broadcast from rank {src}"):
            dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        with self.collective("all_gather_object"):
            dist.all_gather_object(out, obj)
        return out

    def run_on_rank_zero(self, fn: Callable[[], T], *, name: str, timeout_s: float | None = None) -> T | None:
        key = f"{self._rank_zero_calls}"
        self._rank_zero_calls += 1
        limit = timeout_s if timeout_s is not None else RANK_ZERO_TIMEOUT_S
        # Rank 0 marks the region too: every rank counts the same collectives, which the diagnosis relies on.
        with self.collective(name, timeout_s=limit):
            if self.rank == 0:
                try:
                    result = fn()
                except BaseException as exc:
                    self._store.set(key, f"error: {type(exc).__name__}: {exc}")
                    raise
                self._store.set(key, "ok")
                return result
            self._wait_for_key(key, limit, name)
        outcome = self._store.get(key).decode()
        if outcome != "ok":
            raise CollectiveError(f"rank 0 failed in {name!r}: {outcome.removeprefix('error: ')}")
        return None

    def _wait_for_key(self, key: str, limit: float, name: str) -> None:
        # Polling with check() instead of a blocking store.wait(): the store client is shared with the
        # watchdog thread, which must keep publishing heartbeats while this rank waits.
        deadline = time.monotonic() + limit
        while not self._store.check([key]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {limit:.0f}s waiting for rank 0 in {name!r}")
            time.sleep(_POLL_S)

    def teardown(self) -> None:
        # A lagged flag's reduction is still in flight after the last step: finish it before the group
        # goes. Left to a backend thread, its tensor would be freed during interpreter shutdown, which
        # aborts the process (gloo: "terminate called without an active exception").
        if self._lagged is not None:
            with contextlib.suppress(Exception):  # a failed job: nothing left to wait for
                self._lagged[0]()
            self._lagged = None
        self.watchdog.stop()
        if self._group.created:
            self._wait_for_everyone_to_leave()
            destroy_process_group(self._group)

    def _wait_for_everyone_to_leave(self) -> None:
        """Rank 0 hosts the store: it must not take it down while another rank may still be reading it
        (the end of a ``run_on_rank_zero`` wait). Skipped after an abort -- the others are gone."""
        try:
            self._store.set(f"left/{self.rank}", "1")
            if self.rank != 0 or self.watchdog.aborted():
                return
            keys = [f"left/{r}" for r in range(self.world_size)]
            deadline = time.monotonic() + self.collective_timeout_s
            while not self._store.check(keys) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        except Exception:  # the store is already gone: nothing left to protect
            pass
