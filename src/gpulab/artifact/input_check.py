"""``gpulab infer``'s inputs against what the artifact declares (its ``.export.json``: each input's name,
dtype and shape, ``batch``/``sequence`` for a dynamic dimension): one line naming what was expected and
what was given, before the runtime sees them. A wrong shape was a 55-110-line traceback from the runtime,
and NumPy's default float64 an ONNX Runtime traceback; a cast that keeps every value's meaning (float64 to
float32, a wider float or integer) is made and said in one line instead.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from gpulab.errors import DataError, GpulabWarning

DYNAMIC = ("batch", "sequence")
# given -> expected casts that keep what a value means (float64 -> float32 rounds, as the model would)
SAFE_CASTS = {
    ("float64", "float32"),
    ("float16", "float32"),
    ("int32", "int64"),
    ("int16", "int64"),
    ("uint8", "int64"),
    ("bool", "int64"),
}


def check_inputs(inputs: tuple[Any, ...], names: list[str], declared: Any, where: str) -> tuple[Any, ...]:
    """``inputs`` (in the artifact's order, ``names`` theirs) checked against ``declared`` (the sidecar's
    ``inputs``; nothing is checked without it); safe casts made and said, anything else one DataError line."""
    specs = _specs(declared)
    if specs is None:
        return inputs
    if len(specs) != len(inputs):
        expected = ", ".join(_describe(n, d, s) for n, d, s in specs)
        raise DataError(
            f"{where}: {len(inputs)} input arrays given; the artifact takes {len(specs)}: {expected}"
        )
    out, wrong, cast = [], [], []
    for i, (x, (name, dtype, shape), given_name) in enumerate(zip(inputs, specs, names, strict=True)):
        label = repr(name or given_name) if name or given_name else str(i)
        have = str(x.dtype).removeprefix("torch.")
        shape_ok = len(shape) == len(x.shape) and all(
            d in DYNAMIC or d == n for d, n in zip(shape, x.shape, strict=True)
        )
        dtype_ok = dtype is None or have == dtype or (have, dtype) in SAFE_CASTS
        if not (shape_ok and dtype_ok):
            wrong.append(f"{label}: {_describe(None, dtype, shape)} expected, {have} {list(x.shape)} given")
            continue
        if dtype is not None and have != dtype:
            cast.append(f"{label} {have} -> {dtype}")
            x = _cast(x, dtype)
        out.append(x)
    if wrong:
        raise DataError(
            f"{where}: input {'; input '.join(wrong)} (dimensions named batch/sequence take any size)"
        )
    if cast:
        warnings.warn(
            f"cast the inputs to what the artifact takes: {', '.join(cast)}", GpulabWarning, stacklevel=2
        )
    return tuple(out)


def _specs(declared: Any) -> list[tuple[str | None, str | None, list]] | None:
    """(name, dtype, shape) per declared input; None when the sidecar says nothing usable."""
    if not isinstance(declared, list) or not declared:
        return None
    specs = []
    for entry in declared:
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
            return None
        dtype = entry.get("dtype")
        known = isinstance(dtype, str) and isinstance(getattr(np, dtype, None), type)
        name = entry.get("name")
        specs.append((name if isinstance(name, str) else None, dtype if known else None, entry["shape"]))
    return specs


def _cast(x: Any, dtype: str) -> Any:
    """A NumPy array or a torch tensor (infer's inputs) as ``dtype``; torch imported only for a tensor."""
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    import torch

    return x.to(getattr(torch, dtype))


def _describe(name: str | None, dtype: str | None, shape: list) -> str:
    # the name quoted: an input called "input" read "input input float32" in the refusal
    return f"{repr(name) + ' ' if name else ''}{dtype or 'any dtype'} [{', '.join(map(str, shape))}]"
