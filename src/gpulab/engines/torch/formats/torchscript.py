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
from gpulab.warning_filters import quiet

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
        quiet()  # torch's own deprecation and tracer warnings: said once above
        try:
            scripted, how = torch.jit.script(model), "script"
        except Exception:  # scripting rejects much ordinary Python; tracing records one run instead
            scripted, how = _trace(model, example), "trace"
        scripted.save(str(output_path(out)))
        facts = {"method": how}
        if dynamic:
            facts |= _sequences(scripted, model, example)
    return facts


def _sequences(scripted, model: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> dict:
    """Which inputs take another length along dimension 1 (``sequence_inputs``, their positions): the
    token inputs, and float sequences ``[batch, time, features]`` (an LSTM's), tried together first;
    where that fails the token inputs alone, as before float sequences were tried. A float input that
    fails is not called a sequence at all (it may be an image's rows)."""
    tokens = [i for i, x in enumerate(example) if x.dim() >= 2 and not x.is_floating_point()]
    floats = [i for i, x in enumerate(example) if x.dim() == 3 and x.is_floating_point()]
    if floats:
        both = _sequence(scripted, model, example, tokens + floats)
        if both["sequence_dim"] == "dynamic" or not tokens:
            return both if both["sequence_dim"] == "dynamic" else {}
    return _sequence(scripted, model, example, tokens) if tokens else {}


def _sequence(scripted, model: torch.nn.Module, example: tuple[torch.Tensor, ...], which: list[int]) -> dict:
    """Whether the artifact takes another sequence length, as tested, never assumed: the inputs ``which``
    padded with zeros to 1.5x their length, run through it and the eager model. ``sequence_dim``
    ``dynamic`` (with the lengths checked) only where both agree."""
    length = example[which[0]].shape[1]
    longer = length + max(1, length // 2)
    padded = tuple(_padded(x) if i in which else x for i, x in enumerate(example))
    try:
        with torch.no_grad():
            want, got = model(*padded), scripted(*padded)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        return {"sequence_dim": f"fixed (length {longer} fails: {type(exc).__name__}: {first})"}
    if want.shape != got.shape or not torch.allclose(got.float(), want.float(), rtol=1e-4, atol=1e-5):
        return {"sequence_dim": f"fixed (the artifact specialises on length {length})"}
    return {"sequence_dim": "dynamic", "sequence_checked": [length, longer], "sequence_inputs": which}


def _padded(x: torch.Tensor) -> torch.Tensor:
    """An input padded with zeros along dimension 1 to its length plus half (inputs of one length, ids
    and their mask, stay of one length)."""
    longer = x.shape[1] + max(1, x.shape[1] // 2)
    pad = torch.zeros(x.shape[0], longer - x.shape[1], *x.shape[2:], dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=1)


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
        quiet()
        module = torch.jit.load(str(path), map_location="cpu")
    module.eval()
    return lambda *inputs: module(*inputs)
