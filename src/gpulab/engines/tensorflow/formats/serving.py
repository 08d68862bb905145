"""A Keras model as its exports serve it: inputs by position in ``names`` order, handed to the model in
the structure it was trained with (one array; a dict by input name; a list); its outputs one tensor, or
for a model of several a dict by output name (``outputs``: a dict output's keys, a list's ``output0``...).
The formats, the parity check and ``infer`` agree on those orders through here and the artifact's
``export.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.errors import DataError

INPUT = "input"  # the one input's name, as the single-input exports always had it


@dataclass
class Serving:
    model: Any
    names: list[str] = field(default_factory=lambda: [INPUT])
    form: str = "one"  # one | dict | list
    outputs: list[str] | None = None  # several outputs' names (None: one tensor), set by ``probe``

    def structure(self, xs: tuple[Any, ...]) -> Any:
        if self.form == "dict":
            return dict(zip(self.names, xs, strict=True))
        return list(xs) if self.form == "list" else xs[0]

    def __call__(self, *xs: Any, training: bool = False) -> Any:
        """One tensor, or a dict of them by output name for a model of several outputs (a dict or list of
        one is its tensor: the artifact's output is ``output`` as for any model of one)."""
        out = self.model(self.structure(xs), training=training)
        if isinstance(out, (list, tuple)):
            out = {f"output{i}": v for i, v in enumerate(out)}
        if isinstance(out, Mapping):
            return {str(k): v for k, v in out.items()} if len(out) > 1 else next(iter(out.values()))
        return out

    def probe(self, *xs: Any) -> None:
        """One call (a subclassed model creates its variables), which tells its outputs."""
        out = self(*xs)
        self.outputs = list(out) if isinstance(out, dict) else None


def serving(model: Any) -> Serving:
    return model if isinstance(model, Serving) else Serving(model)


def from_arrays(model: Any, x: Any) -> tuple[Serving, tuple[np.ndarray, ...]]:
    """How ``model`` is served from validation inputs ``x`` as ``model.fit`` took them: one array, a dict
    of arrays by input name, or a tuple of them (named as the model's ``keras.Input`` layers)."""
    if isinstance(x, dict):
        return Serving(model, [str(k) for k in x], "dict"), tuple(x.values())
    if isinstance(x, (tuple, list)):
        names = [getattr(t, "name", "") for t in getattr(model, "inputs", None) or []]
        if len(names) != len(x) or len(set(names)) != len(names) or "" in names:
            names = [f"{INPUT}{i}" for i in range(len(x))]
        return Serving(model, names, "list"), tuple(x)
    return Serving(model), (x,)


def input_order(path: Path, found: list[str]) -> list[str]:
    """``path``'s input names in the order its runner takes them: its ``export.json``'s (a signature
    lists them sorted); sorted where the sidecar does not name them all."""
    sidecar = path.with_name(path.name + ".export.json")
    try:
        names = [str(entry["name"]) for entry in json.loads(sidecar.read_text())["inputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(found)
    return names if sorted(names) == sorted(found) else sorted(found)


def output_order(path: Path, found: list[str]) -> list[str] | None:
    """Several outputs' names as ``export.json`` lists them (else sorted); None for one output."""
    if len(found) < 2:
        return None
    sidecar = path.with_name(path.name + ".export.json")
    try:
        names = [str(name) for name in json.loads(sidecar.read_text())["outputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(found)
    return names if sorted(names) == sorted(found) else sorted(found)


def check_count(names: list[str], xs: tuple[Any, ...]) -> None:
    if len(xs) != len(names):
        raise DataError(f"the artifact takes {len(names)} inputs ({', '.join(names)}); {len(xs)} were given")
