"""Recompiles of a ``torch.compile``'d model after its first step, kept out of the reported throughput.

The first step pays the compilation and is never timed. Later ones may compile again: a short last batch
(a new shape) recompiles the training step; the first validation compiles the forward alone, its own
graph (the training step's forward and loss are one compiled region), counted apart as
``validation_compiles``. Each such step or validation batch is one interval whose wall time the
Trainer's clock leaves out; the count and the seconds go to summary.json, so a user sees both. Counted
with dynamo's own frame counter (process-wide), read only when the model is compiled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpulab.engines.torch.torch_private import frames_compiled


class RecompileWatch:
    """Counts compilations inside ``watch()`` blocks once ``armed`` (after the first step) and the wall
    seconds of the blocks that compiled; ``exclude`` (the clock's) is told each such interval."""

    def __init__(self, enabled: bool, exclude: Any) -> None:
        self.enabled = enabled
        self.exclude = exclude
        self.armed = False
        self.recompiles = 0  # of the training step's graph (a new shape, a failed guard)
        self.validation = 0  # the forward alone, compiled once for eval (its own graph, not a recompile)
        self.seconds = 0.0

    @contextmanager
    def watch(self, validation: bool = False) -> Iterator[None]:
        if not (self.enabled and self.armed):
            yield
            return
        before, start = frames_compiled(), time.perf_counter()
        yield
        new = frames_compiled() - before
        if new:
            spent = time.perf_counter() - start
            if validation:
                self.validation += new
            else:
                self.recompiles += new
            self.seconds += spent
            self.exclude(spent)

    def report(self) -> dict[str, float | int]:
        return {
            "recompiles": self.recompiles,
            "validation_compiles": self.validation,
            "recompile_seconds_excluded": round(self.seconds, 3),
        }

    def line(self) -> str:
        """The one line a compiled fit ends with: whether the training graph held after its first step."""
        held = "no recompiles" if not self.recompiles else f"{self.recompiles} recompile(s)"
        val = f"; validation compiled its own graph {self.validation} time(s)" if self.validation else ""
        return f"compile: {held} of the training step after the first{val} ({self.seconds:.1f} s left out)"
