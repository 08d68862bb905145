"""``torchscript``: ``torch.jit.script``, falling back to ``torch.jit.trace`` only where scripting fails.

TorchScript is deprecated in torch 2.x in favour of ``torch.export``; older serving stacks (TorchServe,
LibTorch C++ apps) still load it, so it is kept, with one warning saying so.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from gpulab.errors import GpulabWarning
from gpulab.export.formats.base import Runner, output_path

NAME, SUFFIX, RUNTIME = "torchscript", ".torchscript.pt", "TorchScript (torch.jit.load)"


def available() -> None:
    return None


def write(model: torch.nn.Module, example: tuple[torch.Tensor, ...], dynamic: bool, out: Path) -> dict:
    warnings.warn(
        "TorchScript is deprecated in PyTorch 2.x; prefer --format exported (or aoti, onnx) where the "
        "serving side allows",
        GpulabWarning,
        stacklevel=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own deprecation and tracer warnings: said once above
        try:
            scripted, how = torch.jit.script(model), "script"
        except Exception:  # scripting rejects much ordinary Python; tracing records one run instead
            scripted, how = torch.jit.trace(model, example, check_trace=False), "trace"
        scripted.save(str(output_path(out)))
    return {"method": how}


def load(path: Path) -> Runner:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = torch.jit.load(str(path), map_location="cpu")
    module.eval()
    return lambda *inputs: module(*inputs)
