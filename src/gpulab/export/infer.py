"""``infer``: a batch of inputs through an exported artifact, in the artifact's own runtime; predictions
written as ``.npz`` (``output``, and ``top1`` for class scores)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpulab import engine_registry as engines
from gpulab.artifact import arrays, formats, parity
from gpulab.artifact import data as export_data
from gpulab.artifact.atomic import write_atomically
from gpulab.artifact.input_check import check_inputs
from gpulab.artifact.loader_choice import choose_format
from gpulab.artifact.ownership import check_place, check_replaceable
from gpulab.artifact.predictions import SUFFIX, is_predictions, write_predictions
from gpulab.artifact.sidecar import read_sidecar, sidecar_path
from gpulab.core.recipes.trust import RecipeTrust, check_recorded
from gpulab.errors import ConfigError, DataError


@dataclass
class InferResult:
    predictions: Path
    samples: int
    seconds: float
    runtime: str
    accuracy: float | None


def infer(
    artifact: str | Path,
    *,
    input_file: str | Path | None = None,
    recipe_data: bool = False,
    batch_size: int = 64,
    out: str | Path | None = None,
    runtime: str = "cpu",
    recipe: str | None = None,
    trust_recipe: bool = False,
    fmt: str | None = None,
) -> InferResult:
    """``recipe`` / ``trust_recipe``: the user's word for a ``module:function`` recipe the artifact's
    .export.json names, which ``recipe_data`` would import (``core/recipes/trust.py``). ``fmt``: the
    user's ``--format``; otherwise the file's name and structure choose the loader, never the sidecar
    (``artifact/loader_choice.py``)."""
    artifact = Path(artifact)
    if not (artifact.is_file() or (artifact / "saved_model.pb").is_file()):  # a SavedModel is a directory
        raise ConfigError(f"{artifact}: no such artifact (write one with gpulab export)")
    if (input_file is None) == (not recipe_data):
        raise ConfigError("give exactly one of --input FILE.npz|FILE.npy|DIR and --recipe-data")
    out = Path(out) if out else artifact.with_name(artifact.name + ".predictions.npz")
    check_predictions_out(out)
    sidecar = read_sidecar(artifact)
    module = formats.get(choose_format(artifact, fmt))
    module.available()
    trust = RecipeTrust(recipe, trust_recipe)
    inputs, target = _inputs(artifact, sidecar, input_file, trust)
    if input_file is not None:  # the recipe's own data is what the artifact was checked on
        names = [str(i.get("name") or "") for i in sidecar.get("inputs") or [] if isinstance(i, dict)]
        names += [f"input{i}" for i in range(len(names), len(inputs))]
        inputs = check_inputs(inputs, names, sidecar.get("inputs"), str(input_file))
    fixed = sidecar.get("batch_dim")
    fixed = fixed if isinstance(fixed, int) else None
    runner = _load(module, artifact, runtime)
    started = time.perf_counter()
    try:
        output = export_data.run_batched(runner, inputs, fixed or batch_size, fixed is not None)
    except Exception as exc:  # what the sidecar could not tell (none, or edited): the runtime's own words
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        given = ", ".join(f"{str(x.dtype).removeprefix('torch.')} {list(x.shape)}" for x in inputs)
        raise DataError(f"{artifact}: {module.RUNTIME} refused the inputs ({given}): {first}") from exc
    seconds = time.perf_counter() - started
    write_atomically(out, lambda tmp: write_predictions(tmp, predictions(output)))
    if isinstance(output, dict):  # several outputs: each has its own target, no one accuracy
        return InferResult(out, len(next(iter(output.values()))), seconds, module.RUNTIME, None)
    shift = sidecar.get("labels_shifted") is True  # a causal LM (export.json): accuracy as training reads it
    acc = parity.accuracy(output, target, shift) if parity.is_classifier(output, target) else None
    return InferResult(out, len(output), seconds, module.RUNTIME, acc)


def check_predictions_out(out: Path) -> None:
    """``--out`` ends in .npz (NumPy adds it otherwise: the file landed beside its name, a temporary one
    was left behind), is a path gpulab may write, and holds nothing but earlier predictions of gpulab's."""
    if not out.name.endswith(SUFFIX) or out.name == SUFFIX:
        raise ConfigError(
            f"--out {out}: predictions are an .npz file; give a name ending in .npz (e.g. {out}.npz)"
        )
    check_replaceable(out, "infer's predictions", is_predictions)
    check_place(out)


def predictions(output: Any) -> dict[str, np.ndarray]:
    """``output`` (and ``top1`` for class scores); a model of several outputs: each by its name (and
    ``NAME_top1``)."""
    named = output if isinstance(output, dict) else {"output": output}
    arrays = {}
    for name, tensor in named.items():
        arrays[name] = tensor.numpy()
        if len(named) == 1 and tensor.dim() >= 2:
            arrays["top1"] = tensor.argmax(-1).numpy()
        elif tensor.dim() >= 2 and tensor.shape[-1] > 1:  # class scores, not one regressed value
            arrays[f"{name}_top1"] = tensor.argmax(-1).numpy()
    return arrays


def _load(module, artifact: Path, runtime: str):
    """``cpu``, or ``cuda``: ONNX Runtime's CUDA execution provider (the only runtime here with a choice)."""
    if runtime not in ("cpu", "cuda"):
        raise ConfigError(f"--runtime {runtime!r} is invalid; valid: cpu|cuda")
    if runtime == "cpu":
        return _loaded(module, artifact, cuda=False)
    if module.NAME != "onnx":
        raise ConfigError(f"--runtime cuda runs ONNX artifacts; {artifact} is {module.NAME} (use cpu)")
    if "CUDAExecutionProvider" not in module.providers(cuda=True):
        raise ConfigError(
            "--runtime cuda: this onnxruntime has no CUDAExecutionProvider; fix: pip install onnxruntime-gpu"
        )
    return _loaded(module, artifact, cuda=True)


def _loaded(module, artifact: Path, cuda: bool):
    """The runtime's own loader; a file it cannot read (truncated, not an export) is one line."""
    try:
        return module.load(artifact, cuda=True) if cuda else module.load(artifact)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        why = f"{type(exc).__name__}: {first}"
        raise ConfigError(f"{artifact}: {module.RUNTIME} cannot load it ({why})") from exc


def _inputs(artifact: Path, sidecar: dict[str, Any], input_file: str | Path | None, trust: RecipeTrust):
    """(inputs in the artifact's order, target or None) from the .npz (arrays matched to the artifact's
    input names where it records them) or the recipe's validation data."""
    names = [i.get("name") for i in sidecar.get("inputs") or [] if isinstance(i, dict)]
    if input_file is not None:
        if not names or None in names:  # an artifact without names (TensorFlow's): arrays in file order
            return export_data.from_npz(input_file)
        by_name = (
            sidecar.get("call") == "keywords"
        )  # named by the model (its dict batch's keys), not by gpulab
        data = export_data.named_from_npz(input_file, names=names, by_name=by_name)
        return data.inputs, data.target
    return _recipe_data(artifact, sidecar, trust, names)


def _recipe_data(artifact: Path, sidecar: dict[str, Any], trust: RecipeTrust, names: list[Any]):
    if not sidecar.get("recipe"):
        raise DataError(
            f"{artifact}: no {artifact.name}.export.json naming its recipe; give --input FILE.npz"
        )
    name = check_recorded(str(sidecar["recipe"]), str(sidecar_path(artifact)), trust)
    # The recipe's data in its engine's layout (TensorFlow's images are NHWC), as the artifact's inputs:
    # NumPy across the seam, torch tensors here (infer runs every artifact on them, artifact/data.py).
    import torch

    infer = engines.capability(engines.get(sidecar.get("engine")), "infer")
    recipe = infer.recipe(name, sidecar.get("options") or {})
    inputs, target = infer.inputs(recipe, name, names if names and None not in names else None)
    tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return tuple(map(tensor, inputs)), None if target is None else arrays.tree_map(tensor, target)
