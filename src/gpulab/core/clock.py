"""The fit's clocks: wall-clock throughput that leaves checkpoints and validation out, and the host time
spent waiting for data. No framework here: the engine hands in how to synchronise its device."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class Clock:
    """Wall-clock throughput. The device is synchronised only here, at the start and the end of timing
    and when metrics are read anyway, never inside a step."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.t0: float | None = None
        self.samples0 = 0
        self.last_t: float | None = None
        self.last_samples = 0
        self.excluded = self.interval_excluded = 0.0  # seconds left out (recompiles after the first step)

    def exclude(self, seconds: float) -> None:
        self.excluded += seconds
        self.interval_excluded += seconds

    @contextlib.contextmanager
    def excluding(self) -> Iterator[None]:
        """Leave the block's wall time out of the rates (a checkpoint, a validation: rare, so the device is
        synchronised at its edges: the steps queued before it are training time)."""
        if self.t0 is None:  # not timing yet (before the first step, or a resume at the end)
            yield
            return
        self.synchronize()
        start, before = time.perf_counter(), self.excluded
        try:
            yield
        finally:
            self.synchronize()
            inside = self.excluded - before  # a validation's compilation, already left out
            self.exclude(max(time.perf_counter() - start - inside, 0.0))

    def start(self, samples: int) -> None:
        self.synchronize()
        self.t0 = self.last_t = time.perf_counter()
        self.samples0 = self.last_samples = samples

    def interval_rate(self, samples: int) -> float | None:
        if self.last_t is None:
            return None
        now = time.perf_counter()  # the caller just read a metric, so the device is synchronised
        rate = (samples - self.last_samples) / max(now - self.last_t - self.interval_excluded, 1e-9)
        self.last_t, self.last_samples, self.interval_excluded = now, samples, 0.0
        return rate if samples > self.samples0 else None

    def total(self, samples: int) -> tuple[float, float | None]:
        self.synchronize()
        if self.t0 is None:
            return 0.0, None
        seconds = time.perf_counter() - self.t0
        done, working = samples - self.samples0, seconds - self.excluded
        return seconds, (done / working if done and working > 0 else None)


class DataWaitMeter:
    """Wraps a batch iterable and adds up the host time spent waiting in ``next`` (no device sync).

    For the training loop: ``for batch in meter.wrap(train): ...``; ``meter.seconds`` is the total.
    A large share of the wall time here means the input pipeline is the bottleneck.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.batches = 0

    def wrap(self, batches: Iterable[Any]) -> Iterator[Any]:
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                self.seconds += time.perf_counter() - start
                return
            self.seconds += time.perf_counter() - start
            self.batches += 1
            yield batch
