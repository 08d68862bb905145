"""``savedmodel``: a TensorFlow-engine run's Keras model as a SavedModel directory with a
``serving_default`` signature (one input ``input``, one output ``output``; batch dimension None unless
``--batch-dim N``), as TF Serving loads it; run back through ``tf.saved_model.load`` and that signature.

TensorFlow is imported here only inside the functions (``available`` only looks for it); inputs and
outputs are NumPy arrays (a torch tensor on the CPU is read as one): no torch."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.errors import MissingPackageError

Runner = Callable[..., np.ndarray]  # engines.torch.formats.base.Runner's NumPy twin (that imports torch)

NAME, SUFFIX, RUNTIME = "savedmodel", ".savedmodel", "TensorFlow SavedModel"
PIP_TENSORFLOW = "pip install 'gpulab[tensorflow]'"
SIGNATURE, INPUT, OUTPUT = "serving_default", "input", "output"


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


def spec(example: tuple[np.ndarray, ...], dynamic: bool) -> Any:
    tf = tensorflow()
    x = example[0]
    batch = None if dynamic else x.shape[0]
    return tf.TensorSpec([batch, *x.shape[1:]], tf.as_dtype(str(x.dtype).removeprefix("torch.")), name=INPUT)


def save(model: Any, example: tuple[np.ndarray, ...], dynamic: bool, out: Path) -> None:
    """The SavedModel directory at ``out`` (the export writes it under a temporary name and renames it
    into place: ``artifact.atomic``)."""
    import keras

    archive = keras.export.ExportArchive()
    archive.track(model)
    # A dict output names the signature's output tensor (`output`, not Keras's `output_0`).
    archive.add_endpoint("serve", lambda x: {OUTPUT: model(x, training=False)}, [spec(example, dynamic)])
    archive.write_out(str(out), verbose=False)


def write(model: Any, example: tuple[np.ndarray, ...], dynamic: bool, out: Path) -> dict:
    save(model, example, dynamic, out)
    return {"signature": SIGNATURE, "tensorflow": tensorflow().__version__}


def load(path: Path) -> Runner:
    tf = tensorflow()
    serve = tf.saved_model.load(str(path)).signatures[SIGNATURE]

    def run(x: Any) -> np.ndarray:
        return serve(**{INPUT: tf.constant(np.asarray(x))})[OUTPUT].numpy()

    return run
