"""The inputs an export is checked on and an artifact is run on: the recipe's validation set, or a
``.npz`` (every array but ``target`` is an input, in the file's order), cut into batches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpulab.errors import DataError

Inputs = tuple[torch.Tensor, ...]


def from_npz(path: str | Path) -> tuple[Inputs, torch.Tensor | None]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable .npz of arrays ({exc})") from None
    target = arrays.pop("target", None)
    if not arrays:
        raise DataError(f"{path}: no input arrays (every array but 'target' is an input, in file order)")
    inputs = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays.values())
    return one_input(inputs, str(path)), None if target is None else torch.from_numpy(target)


def from_recipe(val_data: Any, recipe: str) -> tuple[Inputs, torch.Tensor | None]:
    """A recipe's ``val_data`` as tensors: a tuple ``(inputs..., target)``."""
    if (
        isinstance(val_data, (tuple, list))
        and len(val_data) >= 2
        and all(isinstance(t, torch.Tensor) for t in val_data)
    ):
        return one_input(tuple(val_data[:-1]), f"recipe {recipe!r}"), val_data[-1]
    raise DataError(
        f"recipe {recipe!r} has no validation tensors (inputs..., target) to check the export on; "
        "give --input FILE.npz"
    )


def one_input(inputs: Inputs, where: str) -> Inputs:
    if len(inputs) != 1:
        raise DataError(
            f"{where}: {len(inputs)} input arrays; gpulab export serves models of one input tensor"
        )
    return inputs


def batches(inputs: Inputs, size: int, fixed: bool):
    """(batch, real rows) for each slice; a ``fixed``-batch artifact gets the last one padded to ``size``."""
    n = len(inputs[0])
    for start in range(0, n, size):
        chunk = tuple(x[start : start + size] for x in inputs)
        real = len(chunk[0])
        if fixed and real < size:
            pad = torch.arange(size - real) % real  # repeat real rows; their outputs are cut off again
            chunk = tuple(torch.cat([c, c[pad]]) for c in chunk)
        yield chunk, real


def run_batched(fn: Callable[..., torch.Tensor], inputs: Inputs, size: int, fixed: bool) -> torch.Tensor:
    with torch.no_grad():
        outs = [fn(*chunk)[:real].detach().cpu() for chunk, real in batches(inputs, size, fixed)]
    return torch.cat(outs)


def example(inputs: Inputs, batch: int) -> Inputs:
    """``batch`` rows to trace with (repeated when the data has fewer)."""
    index = torch.arange(batch) % len(inputs[0])
    return tuple(x[index] for x in inputs)
