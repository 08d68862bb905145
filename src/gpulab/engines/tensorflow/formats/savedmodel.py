"""``savedmodel``: a TensorFlow-engine run's Keras model as a SavedModel directory with a
``serving_default`` signature (one input ``input``, or a model's several inputs by their names; one output
``output``, or a model's several by their names; batch dimension None unless ``--batch-dim N``), as TF
Serving loads it; run back through ``tf.saved_model.load`` and that signature.

TensorFlow is imported here only inside the functions (``available`` only looks for it); inputs and
outputs are NumPy arrays (a torch tensor on the CPU is read as one): no torch."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.engines.tensorflow.formats.serving import check_count, input_order, output_order, serving
from gpulab.errors import MissingPackageError

Runner = Callable[..., np.ndarray]  # engines.torch.formats.base.Runner's NumPy twin (that imports torch)

NAME, SUFFIX, RUNTIME = "savedmodel", ".savedmodel", "TensorFlow SavedModel"
PIP_TENSORFLOW = "pip install 'gpulab[tensorflow]'"
SIGNATURE, OUTPUT = "serving_default", "output"


def available(fmt: str = NAME) -> None:
    """Looked for, not imported: a refusal that needs no TensorFlow does not pay for its import."""
    if importlib.util.find_spec("tensorflow") is None:
        raise MissingPackageError(
            f"format {fmt} needs the Python package 'tensorflow', which is not installed; "
            f"fix: {PIP_TENSORFLOW}"
        )


def tensorflow() -> Any:
    from gpulab.engines.tensorflow.importing import require_tensorflow

    return require_tensorflow()


def specs(example: tuple[np.ndarray, ...], dynamic: bool, names: list[str]) -> list[Any]:
    tf = tensorflow()
    return [
        tf.TensorSpec(
            [None if dynamic else x.shape[0], *x.shape[1:]],
            tf.as_dtype(str(x.dtype).removeprefix("torch.")),
            name=name,
        )
        for name, x in zip(names, example, strict=True)
    ]


def save(model: Any, example: tuple[np.ndarray, ...], dynamic: bool, out: Path) -> None:
    """The SavedModel directory at ``out`` (the export writes it under a temporary name and renames it
    into place: ``artifact.atomic``). ``model``: a Keras model of one input, or a ``serving.Serving``
    naming several."""
    import keras

    served = serving(model)
    archive = keras.export.ExportArchive()
    archive.track(served.model)

    # A dict output names the signature's output tensors (`output`, not Keras's `output_0`; several
    # outputs by their own names); the inputs take the specs' names.
    def serve(*xs: Any) -> dict[str, Any]:
        out = served(*xs, training=False)
        return out if isinstance(out, dict) else {OUTPUT: out}

    archive.add_endpoint("serve", serve, specs(example, dynamic, served.names))
    archive.write_out(str(out), verbose=False)


def write(model: Any, example: tuple[np.ndarray, ...], dynamic: bool, out: Path) -> dict:
    save(model, example, dynamic, out)
    return {"signature": SIGNATURE, "tensorflow": tensorflow().__version__}


def load(path: Path) -> Runner:
    tf = tensorflow()
    serve = tf.saved_model.load(str(path)).signatures[SIGNATURE]
    names = input_order(path, list(serve.structured_input_signature[1]))
    outputs = output_order(path, list(serve.structured_outputs))

    def run(*xs: Any) -> np.ndarray | dict[str, np.ndarray]:
        check_count(names, xs)
        feed = {name: tf.constant(np.asarray(x)) for name, x in zip(names, xs, strict=True)}
        got = serve(**feed)
        return got[OUTPUT].numpy() if outputs is None else {n: got[n].numpy() for n in outputs}

    return run
