"""The ``layers`` format's runtime: NumPy alone (no torch, no pickle, none of the model's Python) runs
the stack of layers a ``.layers.npz`` holds. ``layers_format.py`` writes it; a deployment would copy
this file and NumPy, nothing else (test_add_an_export_format.py runs it in a process that cannot import
torch)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SPEC = "layers.json"  # the array holding the stack, as JSON text; weights are "<layer index>.<name>"


def _linear(x: np.ndarray, layer: dict, w: dict[str, np.ndarray]) -> np.ndarray:
    return x @ w["weight"].T + w["bias"] if "bias" in w else x @ w["weight"].T


def _conv2d(x: np.ndarray, layer: dict, w: dict[str, np.ndarray]) -> np.ndarray:
    (ph, pw), (sh, sw) = layer["padding"], layer["stride"]
    kernel = w["weight"]  # [out, in, kh, kw]
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = sliding_window_view(x, kernel.shape[2:], axis=(2, 3))[:, :, ::sh, ::sw]  # [n, in, h, w, kh, kw]
    out = np.tensordot(windows, kernel, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    return out + w["bias"][None, :, None, None] if "bias" in w else out


def _maxpool2d(x: np.ndarray, layer: dict, w: dict[str, np.ndarray]) -> np.ndarray:
    (sh, sw) = layer["stride"]
    windows = sliding_window_view(x, layer["kernel"], axis=(2, 3))[:, :, ::sh, ::sw]
    return windows.max(axis=(-2, -1))


OPS: dict[str, Callable[[np.ndarray, dict, dict[str, np.ndarray]], np.ndarray]] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "maxpool2d": _maxpool2d,
    "relu": lambda x, layer, w: np.maximum(x, 0),
    "flatten": lambda x, layer, w: x.reshape(len(x), -1),
}


def load(path: str | Path) -> Callable[[np.ndarray], np.ndarray]:
    """The artifact as a function of one input batch, answering float32. Weights stay in their stored
    dtype (fp32 or fp16) and are computed in float32: NumPy's float16 matmuls accumulate in float16."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    stack = json.loads(str(arrays.pop(SPEC)))
    weights = [
        {
            key.partition(".")[2]: a.astype(np.float32)
            for key, a in arrays.items()
            if key.partition(".")[0] == str(i)
        }
        for i in range(len(stack["layers"]))
    ]
    dtype = np.dtype(stack["dtype"])

    def run(x: np.ndarray) -> np.ndarray:
        x = x.astype(dtype).astype(np.float32)  # the input rounded to the export precision, as torch's
        for layer, w in zip(stack["layers"], weights, strict=True):
            x = OPS[layer["op"]](x, layer, w)
        return x.astype(np.float32)

    return run
