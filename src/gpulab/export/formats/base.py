"""What every export format provides, and the pieces they share.

A format writes an artifact from a ``Deployable`` module and example inputs, and loads one back as a
``Runner``: a function from CPU tensors to one CPU tensor, run by the format's own runtime (never by the
Python model it came from), so parity compares what a serving system would compute.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpulab.errors import ConfigError, MissingPackageError

Runner = Callable[..., torch.Tensor]
PIP_EXPORT = "pip install 'gpulab[export]'"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Deployable(nn.Module):
    """The model as deployed: float inputs cast to the export precision inside, the output returned as
    float32, so every runtime (NumPy-fed ONNX Runtime included, which has no bfloat16) is called alike."""

    def __init__(self, model: nn.Module, precision: str = "fp32") -> None:
        super().__init__()
        self.dtype = DTYPES[precision]
        self.model = model.to(self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # one named input: TorchScript has no *args
        if x.is_floating_point():
            x = x.to(self.dtype)
        return self.model(x).float()


def batch_dims(example: tuple[torch.Tensor, ...], dynamic: bool) -> tuple[dict[int, Any], ...] | None:
    """torch.export's dynamic_shapes: dimension 0 of every input is the same symbolic batch."""
    if not dynamic:
        return None
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    return tuple({0: batch} for _ in example)


def need(module: str, fmt: str, pip: str = PIP_EXPORT) -> Any:
    """Import an optional package, or say in one line which is missing and the pip line that fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackageError(
            f"format {fmt} needs the Python package {module!r}, which is not installed ({exc}); fix: {pip}"
        ) from None


def export_program(model: nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, fmt: str):
    """``torch.export`` of the model; a model it cannot capture is named in one line."""
    try:
        return torch.export.export(model, example, dynamic_shapes=batch_dims(example, dynamic), strict=False)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(
            f"format {fmt}: torch.export cannot capture this model ({type(exc).__name__}: {first}); "
            "try --format torchscript, or --batch-dim N for a fixed batch"
        ) from exc


def output_path(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out
