"""Where a fit failed, as one line added under the traceback of an exception from inside the loop.

The traceback stays (a forward that raises is the user's bug, and the frames are how they find it); the
line under it says what the traceback cannot: the step, the batch and its shapes, and the checkpoint that is
safe to resume from. Keeping the position costs a reference to the batch, never a copy or a device sync.
How a batch is described (its tensors' shapes and dtypes) is the engine's: ``describe`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


class FitPosition:
    """What the loop is doing: ``phase`` (``training``, ``validation``, or None between them), the batch's
    index in its pass, and the batch itself once loaded (None while the next one is being loaded)."""

    __slots__ = ("phase", "index", "batch")

    def __init__(self) -> None:
        self.between()

    def between(self) -> None:
        """Outside a pass over the data: validation done, a checkpoint being written, the end of the fit."""
        self.phase, self.index, self.batch = None, 0, None

    def track(self, phase: str, batches: Iterable[Any], start: int = 0) -> Iterator[Any]:
        """``batches``, noting each one as it is handed over and, after it, that the next is loading."""
        self.phase, self.index, self.batch = phase, start, None
        for batch in batches:
            self.batch = batch
            yield batch
            self.index, self.batch = self.index + 1, None  # asked for the next: the loader runs now
        self.between()


def failure_line(
    position: FitPosition,
    *,
    step: int,
    epoch: int,
    batches_per_epoch: int | None,
    checkpoint: Path | str | None,
    checkpoints_off: str | None = None,
    out_of_memory: bool = False,
    describe: Callable[[Any], str] = lambda batch: type(batch).__name__,
) -> str:
    """``gpulab: the fit failed in step 45 (epoch 1, batch 45/125: ...); safe to resume from ...``.

    ``step`` counts finished optimizer steps; a training failure is in the next one. ``checkpoints_off``:
    why this fit writes none (None: it does). ``describe``: the engine's words for a batch.
    """
    of = f"/{batches_per_epoch}" if batches_per_epoch else ""
    number = position.index + 1
    if position.phase is None:
        where = f"after step {step}"
    elif position.phase == "validation":
        where = f"in validation after step {step} (validation batch {number}"
    else:
        where = f"in step {step + 1} (epoch {epoch + 1}, batch {number}{of}"
    if position.phase is None:
        what = ""
    elif position.batch is not None:
        what = f": {describe(position.batch)})"
    else:
        what = ", while the data loader made it)"
    if checkpoint is not None:
        safe = f"safe to resume from {checkpoint} (--resume latest)"
    elif checkpoints_off is None:
        safe = "no checkpoint yet to resume from"
    else:
        safe = f"no checkpoint ({checkpoints_off})"
    memory = (
        "; out of memory: a smaller batch_size (with a larger accumulate, the same step) needs less"
        if out_of_memory
        else ""
    )
    return f"gpulab: the fit failed {where}{what}{memory}; {safe}"


def add_failure_note(error: BaseException, line: str) -> None:
    """Python prints an exception's notes under its traceback (3.11+; earlier, the line is kept on the
    exception's ``__notes__`` only)."""
    if hasattr(error, "add_note"):
        error.add_note(line)
    else:  # pragma: no cover - Python 3.10
        error.__notes__ = [*getattr(error, "__notes__", []), line]
