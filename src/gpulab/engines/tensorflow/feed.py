"""The recipe's inputs in the structure the model was built on. A functional model built on one named
``keras.Input`` and fed ``{"x": array}`` (the dict of named inputs ``model.fit`` takes) works, but Keras warns
"The structure of `inputs` doesn't match the expected structure" at its first call -- a resumed run's too --
so the fit feeds it what it expects: the array itself, or a tuple of the arrays in its inputs' order for a
model built on a list of inputs. A model without a recorded structure (subclassed, Sequential) is fed as
the recipe gives it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_built(model: Any, x: Any) -> Any:
    """``x`` (a dict of arrays by input name, or anything else) in ``model``'s input structure, where the
    dict names every input of a functional model built on one input or a flat list of them; else ``x``."""
    if not isinstance(x, Mapping):
        return x
    try:
        built = model.input  # a functional model's constructor inputs; others raise until called
    except (AttributeError, ValueError):
        return x
    if isinstance(built, (list, tuple)):
        names = [getattr(t, "name", None) for t in built]
        return tuple(x[n] for n in names) if names and set(names) <= set(x) else x
    name = getattr(built, "name", None)
    return x[name] if isinstance(name, str) and name in x else x
