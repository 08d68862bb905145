"""What the fit loop owns and its callbacks read: the callbacks, the fit's context, the last checkpoint.

The loop (``core/loop.py``) builds a ``LoopState`` and writes only there, never on the engine. Callbacks
receive a ``FitView`` as their ``trainer``: the loop's three fields, read-only, and every other attribute
read through to the engine (the torch MFU callback reads ``trainer.model``), so a user's callback written
against the engine's trainer keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.core.context import FitContext

LOOP_OWNED = frozenset({"callbacks", "context", "last_checkpoint"})


@dataclass
class LoopState:
    callbacks: Any = None  # the CallbackList the engine's set-up returned (None until then)
    context: FitContext | None = None  # the engine's fit_context(), asked once the loop starts
    last_checkpoint: Path | None = None  # the checkpoint this fit wrote last


class FitView:
    """A callback's ``trainer``: ``callbacks``, ``context`` and ``last_checkpoint`` from the loop's state,
    anything else the engine's own. A write to another name goes to the engine (a user's callback setting
    its own flag on the trainer did before); a write to the loop's names is refused."""

    __slots__ = ("_engine", "_loop")

    def __init__(self, engine: Any, loop: LoopState) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_loop", loop)

    @property
    def callbacks(self) -> Any:
        return self._loop.callbacks

    @property
    def context(self) -> FitContext | None:
        return self._loop.context

    @property
    def last_checkpoint(self) -> Path | None:
        return self._loop.last_checkpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in LOOP_OWNED:
            raise AttributeError(f"trainer.{name} is the fit loop's, read-only for a callback")
        setattr(self._engine, name, value)
