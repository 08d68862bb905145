"""The NumPy side of ``data.py``: an ``.npz`` or a recipe's validation data as one input array and its
target, cut into batches. The TensorFlow engine's export runs on these and imports no torch; ``data.py``
wraps the same arrays as tensors for the torch side."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.artifact.array_headers import check_input_file
from gpulab.errors import DataError

Inputs = tuple[np.ndarray, ...]


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz``, an ``.npy`` (one array, named after the file) or a directory of
    ``.npy`` files (each named after its file, in name order); what no model takes, or would not fit,
    refused from the headers first (``array_headers.py``)."""
    path = Path(path)
    if path.exists():  # a missing one: np.load's own line below
        check_input_file(path)
    if path.is_dir():
        files = sorted(path.glob("*.npy"))
        if not files:
            raise DataError(
                f"{path}: a directory of inputs holds .npy files (one per input), and it has none"
            )
        return {f.stem: _read_npy(f) for f in files}
    if path.suffix == ".npy":
        return {path.stem: _read_npy(path)}
    try:
        with np.load(path, allow_pickle=False) as npz:
            if not hasattr(npz, "files"):  # an .npy under another name
                raise ValueError("one array, not an .npz archive: name it FILE.npy")
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz of arrays ({exc})") from None


def _read_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise DataError(f"{path}: not one array (an .npz archive? name it FILE.npz)")
    return array


def from_npz(path: str | Path) -> tuple[Inputs, np.ndarray | None]:
    """Every array but ``target`` is an input, in file order."""
    arrays = read_npz(path)
    target = arrays.pop("target", None)
    if not arrays:
        raise DataError(f"{path}: no input arrays (every array but 'target' is an input, in file order)")
    inputs = tuple(np.ascontiguousarray(a) for a in arrays.values())
    return one_input(inputs, str(path)), target


def as_arrays(data: Any) -> Any:
    """NumPy arrays, a ``tf.data.Dataset`` or a generator of ``(inputs..., target)`` batches as one tuple
    of arrays (batches concatenated); anything else as it is. A dataset is read through its
    ``as_numpy_iterator``: TensorFlow is not imported here."""
    if isinstance(data, (tuple, list)) and data and all(isinstance(a, np.ndarray) for a in data):
        return tuple(np.ascontiguousarray(a) for a in data)
    if hasattr(data, "as_numpy_iterator"):
        data = data.as_numpy_iterator()
    elif not hasattr(data, "__next__"):  # not a generator: tensors, a dict, a Dataset (the callers' cases)
        return data
    batches = [tuple(batch) for batch in data]
    if not batches or any(len(b) != len(batches[0]) for b in batches):
        return ()  # nothing to concatenate: the callers' "no validation tensors" line
    return tuple(concatenate(list(parts)) for parts in zip(*batches, strict=True))


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` on every array of a nesting of dicts, tuples and lists (a model's several inputs)."""
    if isinstance(tree, Mapping):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return tuple(tree_map(fn, v) for v in tree)
    return fn(tree)


def leaves(tree: Any) -> list[Any]:
    found: list[Any] = []
    tree_map(found.append, tree)
    return found


def concatenate(parts: list[Any]) -> Any:
    """One nesting of arrays from a list of equally nested batches (``(dict of inputs, y)`` included)."""
    first = parts[0]
    if isinstance(first, Mapping):
        return {k: concatenate([p[k] for p in parts]) for k in first}
    if isinstance(first, (tuple, list)):
        return tuple(concatenate(list(group)) for group in zip(*parts, strict=True))
    return np.concatenate([np.asarray(p) for p in parts])


def by_names(val_data: Any, names: list[str], recipe: str) -> tuple[Inputs, np.ndarray]:
    """A recipe's ``(x, y)`` validation arrays as the inputs an artifact names: ``x`` a dict by those
    names, or a tuple in their order (a Keras model of several inputs); ``y`` an array, or a dict of them
    by output name (a model of several outputs)."""
    data = as_arrays(val_data)
    x = data[0] if isinstance(data, tuple) and len(data) == 2 else None
    target = tree_map(np.asarray, data[-1]) if isinstance(x, (Mapping, tuple, list)) else None
    if isinstance(x, Mapping) and all(n in x for n in names):
        return tuple(np.ascontiguousarray(np.asarray(x[n])) for n in names), target
    if isinstance(x, (tuple, list)) and len(x) == len(names):
        return tuple(np.ascontiguousarray(np.asarray(a)) for a in x), target
    raise DataError(
        f"recipe {recipe!r}'s validation data does not hold the inputs {', '.join(names)}; "
        "give --input FILE.npz"
    )


def one_input(inputs: tuple, where: str) -> tuple:
    if len(inputs) != 1:
        raise DataError(
            f"{where}: {len(inputs)} input arrays; gpulab export serves models of one input tensor"
        )
    return inputs


def batches(inputs: Inputs, size: int, fixed: bool, cat: Callable[[list], Any] = np.concatenate):
    """(batch, real rows) for each slice; a ``fixed``-batch artifact gets the last one padded to ``size``.
    ``cat`` joins the padding on: NumPy's for arrays, ``torch.cat`` for tensors (a NumPy index array
    indexes both)."""
    n = len(inputs[0])
    for start in range(0, n, size):
        chunk = tuple(x[start : start + size] for x in inputs)
        real = len(chunk[0])
        if fixed and real < size:
            pad = np.arange(size - real) % real  # repeat real rows; their outputs are cut off again
            chunk = tuple(cat([c, c[pad]]) for c in chunk)
        yield chunk, real


def run_batched(fn: Callable[..., Any], inputs: Inputs, size: int, fixed: bool) -> Any:
    """``fn``'s outputs over every batch, joined: one array, or a dict of them (a model's several
    outputs by name)."""
    outs = [
        tree_map(lambda a, r=real: np.asarray(a)[:r], fn(*chunk))
        for chunk, real in batches(inputs, size, fixed)
    ]
    return concatenate(outs)


def example(inputs: Inputs, batch: int) -> Inputs:
    """``batch`` rows to trace with (repeated when the data has fewer)."""
    index = np.arange(batch) % len(inputs[0])
    return tuple(x[index] for x in inputs)
