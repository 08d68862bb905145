"""``tflite``: the SavedModel (``savedmodel.py``) converted by ``tf.lite.TFLiteConverter.from_saved_model``
with the built-in ops only, run back in ``tf.lite.Interpreter``. A dynamic batch stays dynamic (the
interpreter is resized to each batch); a model the converter cannot take is one line naming why."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.engines.tensorflow.formats import savedmodel
from gpulab.engines.tensorflow.formats.savedmodel import Runner
from gpulab.engines.tensorflow.formats.serving import check_count, input_order, output_order
from gpulab.errors import ConfigError
from gpulab.warning_filters import quiet

NAME, SUFFIX, RUNTIME = "tflite", ".tflite", "TensorFlow Lite Interpreter"


def available() -> None:
    savedmodel.available(NAME)


def write(model: Any, example: tuple[np.ndarray, ...], dynamic: bool, out: Path) -> dict:
    tf = savedmodel.tensorflow()
    work = Path(tempfile.mkdtemp(prefix="gpulab-tflite-"))
    try:
        savedmodel.save(model, example, dynamic, work / "model")
        try:
            flat = tf.lite.TFLiteConverter.from_saved_model(str(work / "model")).convert()
        except Exception as exc:  # ConverterError: an op without a TFLite built-in kernel
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(
                f"format tflite: TFLiteConverter cannot convert this model ({type(exc).__name__}: {first}); "
                "use --format savedmodel"
            ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(flat)
    return {"tensorflow": tf.__version__, "bytes": len(flat)}


def interpreter(path: Path) -> Any:
    tf = savedmodel.tensorflow()
    with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated": TF's notice, not the user's
        quiet(".*tf.lite.Interpreter is deprecated", UserWarning)
        return tf.lite.Interpreter(model_path=str(path))


def load(path: Path) -> Runner:
    interp = interpreter(path)
    if len(interp.get_input_details()) > 1 or len(interp.get_output_details()) > 1:
        return _by_name(interp, path)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    shape = [None]  # the input shape allocated last: resize only when a batch differs

    def run(x: Any) -> np.ndarray:
        x = np.asarray(x)  # a CPU torch tensor (infer's) is read in place
        if shape[0] != tuple(x.shape):
            interp.resize_tensor_input(inp["index"], list(x.shape))
            interp.allocate_tensors()
            shape[0] = tuple(x.shape)
        interp.set_tensor(inp["index"], x.astype(inp["dtype"], copy=False))
        interp.invoke()
        return interp.get_tensor(out["index"]).copy()

    return run


def _by_name(interp: Any, path: Path) -> Runner:
    """Several inputs or outputs: by name through the signature (the interpreter's tensor order is its
    own); the signature runner resizes to each batch."""
    runner = interp.get_signature_runner(savedmodel.SIGNATURE)
    details = runner.get_input_details()
    names = input_order(path, list(details))
    outputs = output_order(path, list(runner.get_output_details()))

    def run(*xs: Any) -> np.ndarray | dict[str, np.ndarray]:
        check_count(names, xs)
        feed = {
            n: np.asarray(x).astype(details[n]["dtype"], copy=False) for n, x in zip(names, xs, strict=True)
        }
        got = runner(**feed)
        return got[savedmodel.OUTPUT].copy() if outputs is None else {n: got[n].copy() for n in outputs}

    return run
