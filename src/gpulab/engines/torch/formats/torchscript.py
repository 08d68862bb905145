"""``torchscript``: ``torch.jit.script``, falling back to ``torch.jit.trace`` only where scripting fails.

TorchScript is deprecated in torch 2.x in favour of ``torch.export``; older serving stacks (TorchServe,
LibTorch C++ apps) still load it, so it is kept, with one warning saying so.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from gpulab.engines.torch.formats.base import Runner, output_path
from gpulab.errors import ConfigError, GpulabWarning

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
            scripted, how = _trace(model, example), "trace"
        scripted.save(str(output_path(out)))
    return {"method": how}


def _trace(model: torch.nn.Module, example: tuple[torch.Tensor, ...]):
    """One recorded run; a model neither scripting nor tracing takes is one line naming the formats that
    capture Python differently. A traced graph fixes every shape but the batch's sizes it was given."""
    try:
        return torch.jit.trace(model, example, check_trace=False)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(
            f"format torchscript cannot serve this model: neither torch.jit.script nor torch.jit.trace "
            f"takes it ({type(exc).__name__}: {first}); formats that can: exported, onnx, aoti"
        ) from None


def load(path: Path) -> Runner:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = torch.jit.load(str(path), map_location="cpu")
    module.eval()
    return lambda *inputs: module(*inputs)
