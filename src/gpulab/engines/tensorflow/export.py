"""``export`` for a TensorFlow-engine run: the Keras model rebuilt from the run's recipe and options
(summary.json) with its ``model.weights.h5``, written as SavedModel or TFLite, loaded back in that runtime
and checked against the eager Keras model with the same parity code and report as the torch formats.

TensorFlow is imported only in here (and in the format modules), never by ``gpulab export`` for torch; the
data and outputs are NumPy arrays (``gpulab.artifact.arrays``): no torch."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.artifact import arrays, parity
from gpulab.artifact.atomic import write_atomically, write_text
from gpulab.artifact.ownership import check_export_out
from gpulab.artifact.run_record import SUMMARY_FILE, file_stem, run_summary
from gpulab.checkpoint.io import verify_files
from gpulab.core.recipes.trust import RecipeTrust, check_recorded
from gpulab.engines.tensorflow.data import as_arrays
from gpulab.engines.tensorflow.formats.serving import Serving, from_arrays
from gpulab.errors import CheckpointError, ConfigError, DataError

# As engines/tensorflow/run.py writes them (not imported: keeps this module light).
WEIGHTS_FILE = "model.weights.h5"
WEIGHTS_MANIFEST = "model.weights.manifest.json"


@dataclass
class KerasSource:
    model: Any  # a formats.serving.Serving: the Keras model, its inputs' names and structure
    recipe: str
    options: dict[str, Any]
    weights: Path
    step: int | None
    run_dir: Path
    val_data: Any


def check_run(path: Path, trust: RecipeTrust) -> tuple[dict[str, Any], Path]:
    """(summary, weights file), refused in one line before TensorFlow is imported: no weights, weights
    that differ from their manifest, or a recipe the user has not trusted."""
    summary = run_summary(path) or {}
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(
            f"{path}: no {WEIGHTS_FILE} (the TensorFlow engine writes it when a run ends); "
            "train it to the end with gpulab train --engine tensorflow --out " + str(path)
        )
    if not summary.get("recipe"):
        raise ConfigError(f"{path}/summary.json does not name the run's recipe; export a gpulab train run")
    check_recorded(str(summary["recipe"]), str(path / SUMMARY_FILE), trust)
    verify_files(path, WEIGHTS_MANIFEST)
    return summary, weights


def keras_recipe(name: str, options: dict[str, Any]):
    from gpulab.engines.tensorflow.importing import require_tensorflow
    from gpulab.engines.tensorflow.recipes import load_tf_recipe

    require_tensorflow()
    return load_tf_recipe(name, options)


def rebuild_keras(path: Path, trust: RecipeTrust) -> KerasSource:
    summary, weights = check_run(path, trust)
    name = str(summary["recipe"])
    options = dict(summary.get("config", {}).get("options") or {})
    recipe = keras_recipe(name, options)
    model = recipe.model()
    val_data = as_arrays(recipe.val_data)  # NumPy, tf.data or a generator: read once, here
    served, inputs, _ = keras_inputs(model, val_data, name)
    served.probe(*(x[:1] for x in inputs))  # creates the variables (a subclassed model has none yet)
    try:
        model.load_weights(str(weights))
    except Exception as exc:  # a truncated file, or weights of other options than summary.json records
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise CheckpointError(f"{weights}: cannot load into the {name} model ({first})") from None
    return KerasSource(served, name, options, weights, summary.get("steps"), path, val_data)


def keras_inputs(model: Any, val_data: Any, recipe: str) -> tuple[Serving, tuple[np.ndarray, ...], Any]:
    """(how the model is served, its inputs in that order, the target) from validation data as
    ``model.fit`` takes it: ``(x, y)`` with ``x`` one array, a dict by input name or a tuple."""
    if not (isinstance(val_data, tuple) and len(val_data) >= 2):
        raise DataError(
            f"recipe {recipe!r} has no validation data (inputs, target) to check the export on; "
            "give --input FILE.npz"
        )
    x = val_data[0] if len(val_data) == 2 else val_data[:-1]
    served, inputs = from_arrays(model, x)
    return served, tuple(np.ascontiguousarray(a) for a in inputs), val_data[-1]


def npz_inputs(path: Path, served: Serving) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
    """An ``.npz``'s arrays as the model's inputs: by the inputs' names where it holds them all, else in
    file order; ``target`` (or ``labels``) is the target."""
    found = arrays.read_npz(path)
    target = found.pop("target", found.pop("labels", None))
    if all(name in found for name in served.names):
        return tuple(found[name] for name in served.names), target
    if len(found) != len(served.names):
        raise DataError(
            f"{path}: {len(found)} input arrays ({', '.join(found)}) for a model of {len(served.names)} "
            f"inputs ({', '.join(served.names)}): name them so, or give them in that order"
        )
    return tuple(found.values()), target


def eager_runner(model: Serving):
    """The Keras model called eagerly (inference mode: dropout off): the reference of the parity check."""

    def run(*xs: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        out = model(*xs, training=False)
        return {k: v.numpy() for k, v in out.items()} if isinstance(out, dict) else out.numpy()

    return run


def export_tf(
    path: Path, module, fixed: int | None, out, input_file, sidecar: str, batch: dict, trust: RecipeTrust
):
    from gpulab.artifact.sidecar import ExportResult

    source = rebuild_keras(path, trust)
    if input_file:
        inputs, target = npz_inputs(Path(input_file), source.model)
    else:
        _, inputs, target = keras_inputs(source.model.model, source.val_data, source.recipe)
    artifact = Path(out) if out else path / "export" / f"{file_stem(source.recipe)}{module.SUFFIX}"
    check_export_out(artifact, module.NAME)  # the default place too: a file there may be the user's
    example = arrays.example(inputs, fixed or batch["example"])
    started = time.perf_counter()
    weights = sum(int(np.prod(w.shape)) * w.dtype.itemsize for w in source.model.model.get_weights())
    facts = write_atomically(
        artifact, lambda tmp: module.write(source.model, example, fixed is None, tmp), needed=weights
    )
    info = describe(module, source, fixed, inputs, time.perf_counter() - started) | facts
    write_text(artifact.with_name(artifact.name + sidecar), json.dumps(info, indent=2) + "\n")
    size = fixed or batch["parity"]
    eager = arrays.run_batched(eager_runner(source.model), inputs, size, fixed is not None)
    got = arrays.run_batched(module.load(artifact), inputs, size, fixed is not None)
    report = {"format": module.NAME, "runtime": module.RUNTIME, "precision": "fp32"}
    report |= parity.compare_outputs(eager, got, target, "fp32")
    report["reference"] = "eager Keras model"
    report["data"] = str(input_file) if input_file else f"recipe {source.recipe} validation set"
    return ExportResult(artifact, report, parity.write(report, artifact), info)


def _names(served: Serving) -> list[dict[str, str]]:
    """Every input by the name its exported signature gives it (the one input of a model fed one array,
    a subclassed model's say: ``input``), so an .npz can name its arrays as the artifact does."""
    return [{"name": name} for name in served.names]


def describe(module, source: KerasSource, fixed: int | None, inputs, seconds: float) -> dict[str, Any]:
    """``PATH.export.json``, as the torch formats write it; ``engine`` tells infer to use the TF recipe."""
    return {
        "format": module.NAME,
        "runtime": module.RUNTIME,
        "engine": "tensorflow",
        "recipe": source.recipe,
        "options": source.options,
        "checkpoint": str(source.weights),
        "step": source.step,
        "precision": "fp32",
        "batch_dim": "dynamic" if fixed is None else fixed,
        "inputs": [
            {**named, "dtype": str(x.dtype), "shape": ["batch", *x.shape[1:]]}
            for named, x in zip(_names(source.model), inputs, strict=True)
        ],
        **({"outputs": source.model.outputs} if source.model.outputs else {}),
        "export_seconds": round(seconds, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
