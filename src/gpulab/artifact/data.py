"""The inputs an export is checked on and an artifact is run on: the recipe's validation set, or a
``.npz`` (every array but ``target``/``labels`` is an input; named arrays go to the model's inputs of
those names), cut into batches.

``named_*`` serve models of any inputs (a dict batch's keys, several tuple inputs) and say how the model
is called; the tuple-only ``from_npz``/``from_recipe`` remain for the TensorFlow side's one-input models.

The inputs are torch tensors (infer runs every artifact on them); torch is imported by the functions that
make them, not as this module loads."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpulab.artifact import arrays
from gpulab.errors import DataError, GpulabWarning

if TYPE_CHECKING:
    import torch

Inputs = tuple  # of torch tensors


def from_npz(path: str | Path) -> tuple[Inputs, torch.Tensor | None]:
    import torch

    inputs, target = arrays.from_npz(path)
    return tuple(map(torch.from_numpy, inputs)), None if target is None else torch.from_numpy(target)


def from_recipe(val_data: Any, recipe: str) -> tuple[Inputs, torch.Tensor | None]:
    """A recipe's ``val_data`` as tensors: a tuple ``(inputs..., target)`` of tensors or NumPy arrays, a
    ``tf.data.Dataset`` of such batches, or a generator/iterable of them (what a Keras user passes)."""
    import torch

    val_data = as_torch(val_data)
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


def as_torch(data: Any) -> Any:
    """NumPy arrays, a ``tf.data.Dataset`` or a generator of ``(inputs..., target)`` batches as one tuple
    of torch tensors (batches concatenated, ``arrays.as_arrays``); anything else as it is."""
    import torch

    found = arrays.as_arrays(data)
    if isinstance(found, tuple) and all(isinstance(a, np.ndarray) for a in found):
        return tuple(torch.from_numpy(a) for a in found)
    return found


one_input = arrays.one_input


TARGET_NAMES = ("target", "labels")


@dataclass
class Named:
    """Inputs with names, in the order a served model takes them; ``keyword``: passed to ``forward``
    by those names (a dict-batch model), else by position."""

    names: list[str]
    inputs: Inputs
    target: torch.Tensor | None
    keyword: bool


def _collated(val_data: Any) -> Any:
    """A map-style Dataset of samples as one batch of tensors (the default collate, dataclass samples
    field by field); a dataclass batch as the dict of its set fields (the model is called alike with
    both); NumPy arrays as tensors; else as it is."""
    import torch

    if isinstance(val_data, torch.utils.data.Dataset) and hasattr(val_data, "__len__"):
        from torch.utils.data import default_collate

        samples = [val_data[i] for i in range(len(val_data))]
        if not _is_dataclass(samples[0]):
            return default_collate(samples)
        val_data = {k: default_collate([_fields(s)[k] for s in samples]) for k in _fields(samples[0])}
    if _is_dataclass(val_data):
        val_data = _fields(val_data)
    tensor = lambda v: torch.from_numpy(v) if isinstance(v, np.ndarray) else v  # noqa: E731
    if isinstance(val_data, Mapping):
        return {k: tensor(v) for k, v in val_data.items()}
    return type(val_data)(map(tensor, val_data)) if isinstance(val_data, (tuple, list)) else val_data


def _is_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass batch or sample as the dict of its fields that are set (not None)."""
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return {k: v for k, v in fields.items() if v is not None}


def named_from_recipe(val_data: Any, recipe: str, signature: Any) -> Named:
    """A recipe's validation data as named inputs: a tuple ``(inputs..., target)``, a dict of tensors
    (its target ``labels``), or a map-style Dataset of either."""
    import torch

    data = _collated(val_data)
    if isinstance(data, Mapping) and data and all(isinstance(v, torch.Tensor) for v in data.values()):
        names = signature.input_names(data)
        return Named(names, tuple(data[n] for n in names), data.get("labels"), keyword=True)
    if isinstance(data, (tuple, list)) and len(data) >= 2 and all(isinstance(t, torch.Tensor) for t in data):
        return Named(signature.input_names(data), tuple(data[:-1]), data[-1], keyword=False)
    raise DataError(
        f"recipe {recipe!r} has no validation tensors ((inputs..., target) or a dict of tensors) to check "
        "the export on; give --input FILE.npz with one array per model input"
    )


def named_from_npz(
    path: str | Path, signature: Any = None, names: list[str] | None = None, by_name: bool = False
) -> Named:
    """An .npz's arrays as named inputs. ``names`` (an artifact's inputs): the arrays of those names; where
    the model named them (``by_name``: a dict batch's keys, which ONNX Runtime takes by name only) an array
    named otherwise is refused with the names expected; where gpulab named them by position (``input``,
    ``input0..``) the arrays go in file order, and a renamed one is said. Otherwise (an export) the arrays
    ``forward`` takes by name are passed by keyword, the others by position, and a renamed one is said."""
    import torch

    arrays = _read_npz(path)
    found = next((arrays.pop(t) for t in TARGET_NAMES if t in arrays), None)
    target = None if found is None else torch.from_numpy(found)
    if not arrays:
        raise DataError(f"{path}: no input arrays (every array but 'target'/'labels' is an input)")
    tensors = {k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in arrays.items()}
    if names is not None:
        if all(n in tensors for n in names):
            return Named(list(names), tuple(tensors[n] for n in names), target, keyword=True)
        named = not unnamed(path, list(tensors))
        if (by_name and named) or any(n in tensors for n in names) or len(tensors) != len(names):
            raise DataError(
                f"{path}: arrays {list(tensors)}; the model's inputs are {list(names)}: name one array "
                "after each (np.savez(FILE, **{name: array}))"
                + ("" if by_name else ", or save them unnamed in that order (np.savez(FILE, *arrays))")
            )
        _say_renamed(path, list(tensors), list(names), "the artifact's inputs are named by position", named)
        return Named(list(names), tuple(tensors.values()), target, keyword=False)
    keyword = signature is not None and signature.keywords(tensors).keys() == tensors.keys()
    n = len(tensors)
    listed = list(tensors) if keyword else ["input"] if n == 1 else [f"input{i}" for i in range(n)]
    why = f"{signature.text if signature else 'forward'} takes no argument of that name; passed by position"
    _say_renamed(path, list(tensors), listed, why, not unnamed(path, list(tensors)))
    return Named(listed, tuple(tensors.values()), target, keyword)


def _say_renamed(path: str | Path, given: list[str], taken: list[str], why: str, named: bool) -> None:
    """One line for arrays the user named that feed an input of another name (silent before: issue 40)."""
    renamed = [(a, b) for a, b in zip(given, taken, strict=True) if a != b]
    if renamed and named:
        said = ", ".join(f"array {a!r} as input {b!r}" for a, b in renamed)
        warnings.warn(f"{path}: fed {said} ({why})", GpulabWarning, stacklevel=3)


def unnamed(path: str | Path, found: list[str]) -> bool:
    """Arrays the user gave no name: ``np.savez(FILE, *arrays)``'s ``arr_0, arr_1, ...``, or one ``.npy``
    file (its name is the file's, not an input's)."""
    path = Path(path)
    if path.suffix == ".npy" and not path.is_dir():
        return True
    return found == [f"arr_{i}" for i in range(len(found))]


_read_npz = arrays.read_npz


def run_batched(fn: Callable[..., Any], inputs: Inputs, size: int, fixed: bool) -> Any:
    import torch

    with torch.no_grad():
        # torch.as_tensor: a TensorFlow runtime's runner (infer of a TF artifact) returns NumPy arrays, and
        # for a model of several outputs a dict of them by output name
        chunks = arrays.batches(inputs, size, fixed, cat=torch.cat)
        outs = [
            arrays.tree_map(lambda t, r=real: torch.as_tensor(t)[:r].detach().cpu(), fn(*c))
            for c, real in chunks
        ]
    if outs and isinstance(outs[0], Mapping):
        return {name: torch.cat([o[name] for o in outs]) for name in outs[0]}
    return torch.cat(outs)


def example(inputs: Inputs, batch: int) -> Inputs:
    """``batch`` rows to trace with (repeated when the data has fewer)."""
    import torch

    index = torch.arange(batch) % len(inputs[0])
    return tuple(x[index] for x in inputs)
