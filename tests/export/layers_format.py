"""``layers``: a torch model that is a stack of layers (``nn.Sequential`` of Linear, Conv2d, ReLU,
MaxPool2d, Flatten, Dropout), written as one ``.npz`` of its weights and a JSON description of the stack,
and run back by NumPy alone (``layers_runtime.py``). The export format docs/ARCHITECTURE.md's "How to add
an export format" adds, followed by test_add_an_export_format.py: the module's six names, registered with
``gpulab.artifact.formats.register``, and nothing else of gpulab edited."""

from __future__ import annotations

import json
from pathlib import Path

import layers_runtime
import numpy as np
import torch
from torch import nn

from gpulab.engines.torch.formats.base import Runner, output_path
from gpulab.errors import ConfigError

NAME, SUFFIX, RUNTIME = "layers", ".layers.npz", "NumPy (layers_runtime.py)"
SERVES = "Linear, Conv2d, ReLU, MaxPool2d, Flatten, Dropout"


def available() -> None:
    return None  # NumPy is one of gpulab's own dependencies


def write(model: nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    """Any batch runs (NumPy has no fixed shapes), so ``dynamic`` asks nothing more."""
    if model.dtype == torch.bfloat16:
        raise ConfigError(
            f"format {NAME} stores NumPy arrays, which have no bfloat16; use --precision fp32|fp16"
        )
    layers, arrays = [], {}
    for layer in _stack(model):
        spec = _describe(layer)
        if spec is None:  # a Dropout: nothing at inference
            continue
        for key, value in layer.state_dict().items():
            arrays[f"{len(layers)}.{key}"] = value.numpy(force=True)
        layers.append(spec)
    stack = {"dtype": str(model.dtype).removeprefix("torch."), "layers": layers}
    arrays[layers_runtime.SPEC] = np.array(json.dumps(stack))
    with open(output_path(out), "wb") as f:  # a file object: np.savez would add .npz to a name without it
        np.savez(f, **arrays)
    return {"layers": [spec["op"] for spec in layers]}


def load(path: Path) -> Runner:
    run = layers_runtime.load(path)
    return lambda x: torch.from_numpy(run(x.numpy(force=True)))


def _stack(model: nn.Module) -> list[nn.Module]:
    """The model's layers in order (nested Sequentials flattened); one line for a model that is not one
    tensor in, a stack of these layers, one tensor out."""
    inner = getattr(model, "model", model)  # export's Deployable wraps the user's model
    if len(getattr(model, "input_names", ())) != 1 or not isinstance(inner, nn.Sequential):
        _refuse(type(inner).__name__)
    return _flat(inner)


def _flat(sequence: nn.Sequential) -> list[nn.Module]:
    return [leaf for c in sequence.children() for leaf in (_flat(c) if isinstance(c, nn.Sequential) else [c])]


def _describe(layer: nn.Module) -> dict | None:
    """The layer as the runtime reads it; None for one inference skips."""
    if isinstance(layer, (nn.Dropout, nn.Identity)):
        return None
    if isinstance(layer, nn.Linear):
        return {"op": "linear"}
    if isinstance(layer, nn.ReLU):
        return {"op": "relu"}
    if isinstance(layer, nn.Flatten) and layer.start_dim == 1 and layer.end_dim == -1:
        return {"op": "flatten"}
    if isinstance(layer, nn.Conv2d) and _plain_conv(layer):
        return {"op": "conv2d", "padding": _pair(layer.padding), "stride": _pair(layer.stride)}
    if isinstance(layer, nn.MaxPool2d) and _plain_pool(layer):
        return {"op": "maxpool2d", "kernel": _pair(layer.kernel_size), "stride": _pair(layer.stride)}
    _refuse(f"{layer!r}")
    return None


def _plain_conv(conv: nn.Conv2d) -> bool:
    """Zero padding given in numbers ("same" is worked out by torch), no groups, no dilation."""
    numbers = not isinstance(conv.padding, str) and conv.padding_mode == "zeros"
    return numbers and conv.groups == 1 and _pair(conv.dilation) == [1, 1]


def _plain_pool(pool: nn.MaxPool2d) -> bool:
    return _pair(pool.padding) == [0, 0] and _pair(pool.dilation) == [1, 1] and not pool.ceil_mode


def _pair(value: int | tuple[int, ...]) -> list[int]:
    return [value, value] if isinstance(value, int) else list(value)


def _refuse(what: str) -> None:
    raise ConfigError(
        f"format {NAME} runs a stack (nn.Sequential) of {SERVES}, one tensor in and out; this model has "
        f"{what}; formats that can serve it: exported|onnx|torchscript"
    )
