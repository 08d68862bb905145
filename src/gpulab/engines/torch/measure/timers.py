"""Step timers that split a training step into phases, read only after the device has finished.

``PhaseTimer`` marks the boundaries of consecutive phases (data wait, forward, backward, optimizer,
communication); each phase lasts from its mark to the next one, and the step from its first mark to
the next step's first mark, so the phases and ``idle`` (the step's time outside every phase: Python
between steps, logging, the profiler's own bookkeeping) add up to the step by construction.

- CUDA: each mark is a CUDA event recorded on the current stream, and the times are GPU times between
  events. A phase is therefore how long the *device* spent in it: data the host fetched while the GPU
  was still busy with the previous step costs nothing, data the GPU had to wait for shows up. The host
  never waits inside the step; the events are read once, after the step, when the last one completed.
- Elsewhere: ``time.perf_counter`` at each mark, after synchronising the device (CPU kernels finish
  before they return, so on the CPU that costs nothing).

``DataWaitMeter`` (``core/clock.py``, named here too) is the light version for the training loop: host time
spent waiting for the next batch, no synchronisation at all.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from gpulab.core.clock import DataWaitMeter  # noqa: F401 -- the loop's meter, named here too
from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.memory import synchronize

PHASES = ("data", "forward", "backward", "communication", "optimizer")
OUTLIER_FACTOR = 4.0  # a step this many times the median is an outlier (descheduled, a GC pause)


class PhaseTimer:
    """``start_step()``, then ``mark(phase)`` at the start of each phase, then ``end_step()``.

    ``steps`` holds one dict per finished step: seconds per phase, ``step`` (the whole step) and
    ``idle``. The step is closed at the next ``start_step`` or at ``finish()``.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.steps: list[dict[str, float]] = []
        self._marks: list[tuple[str, Any]] = []  # (phase, clock) in order; "end" closes the last phase

    # -- clocks (overridden where the device has timing events) ----------------------------------------
    def _now(self) -> Any:
        synchronize(self.device)
        return time.perf_counter()

    def _elapsed(self, a: Any, b: Any) -> float:
        return b - a

    # -- marking --------------------------------------------------------------------------------------
    def start_step(self) -> None:
        now = self._now()
        if self._marks:
            self._close(now)
        self._marks = [("step", now)]

    def mark(self, phase: str) -> None:
        self._marks.append((phase, self._now()))

    def end_phase(self) -> None:
        """End the current phase without starting another (what follows counts as idle)."""
        self._marks.append(("idle", self._now()))

    def finish(self) -> None:
        """Close the open step at this moment."""
        if self._marks:
            self._close(self._now())
            self._marks = []

    def _close(self, end: Any) -> None:
        marks = [*self._marks, ("end", end)]
        self._resolve(marks)
        times: dict[str, float] = {}
        for (phase, a), (_, b) in zip(marks[1:], marks[2:], strict=False):
            if phase != "idle":
                times[phase] = times.get(phase, 0.0) + self._elapsed(a, b)
        step = self._elapsed(marks[0][1], end)
        times["step"] = step
        times["idle"] = max(0.0, step - sum(v for k, v in times.items() if k != "step"))
        self.steps.append(times)

    def _resolve(self, marks: list[tuple[str, Any]]) -> None:
        """Wait for the clocks of ``marks`` to be readable (CUDA events to complete)."""

    # -- results --------------------------------------------------------------------------------------
    def summary(self, outlier_factor: float | None = OUTLIER_FACTOR) -> dict[str, float]:
        """Mean seconds per phase over the kept steps, with every phase of ``PHASES`` present.

        Means, not medians, so that the phases still add up to the step. A step longer than
        ``outlier_factor`` times the median step is left out (a whole step, never one phase): on a
        shared machine one descheduled step would otherwise outweigh ten normal ones. ``outliers()``
        lists what was left out.
        """
        steps = self.kept_steps(outlier_factor)
        if not steps:
            return {}
        keys = dict.fromkeys([*PHASES, "idle", "step"])
        keys.update(dict.fromkeys(k for s in steps for k in s))
        return {k: sum(s.get(k, 0.0) for s in steps) / len(steps) for k in keys}

    def kept_steps(self, outlier_factor: float | None = OUTLIER_FACTOR) -> list[dict[str, float]]:
        if not self.steps or outlier_factor is None:
            return list(self.steps)
        limit = outlier_factor * statistics.median(s["step"] for s in self.steps)
        return [s for s in self.steps if s["step"] <= limit]

    def outliers(self, outlier_factor: float | None = OUTLIER_FACTOR) -> list[dict[str, float]]:
        kept = self.kept_steps(outlier_factor)
        return [s for s in self.steps if not any(s is k for k in kept)]


class EventPhaseTimer(PhaseTimer):
    """Marks are the device's timing events (``Accelerator.timing_event``: CUDA events on the run's
    device's current stream); read after the step's last event completed."""

    def __init__(self, device: torch.device | str) -> None:
        super().__init__(device)
        self._event = accelerator(self.device).timing_event

    def _now(self) -> Any:
        return self._event()

    def _elapsed(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0  # ms -> s

    def _resolve(self, marks: list[tuple[str, Any]]) -> None:
        marks[-1][1].synchronize()


def phase_timer(device: torch.device | str) -> PhaseTimer:
    """The timer for ``device``'s kind: its timing events where it has them (CUDA), synchronised
    ``perf_counter`` otherwise."""
    return (EventPhaseTimer if accelerator(device).timing_events else PhaseTimer)(device)
