"""Run in its own process by test_export_savedmodel.py (TensorFlow's import costs seconds; paid once):
train digits on the TensorFlow engine through the CLI, export it as SavedModel and TFLite, run both through
``gpulab infer``, and print every figure the tests check as one JSON line (``RESULT {...}``)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from gpulab.cli import main

PAYLOAD = "logging.config:dictConfig"
OWN = "my_tf_digits:build"


def cli(*argv: str) -> dict:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(argv))
    return {"code": code, "err": err.getvalue().strip()}


def refusals(root: Path) -> dict:
    """Refused before anything is built, TensorFlow not imported yet."""
    torch_run, tf_run = root / "torch-run", root / "tf-run"
    for run, summary in (
        (torch_run, {"recipe": "digits"}),
        (tf_run, {"recipe": "digits", "engine": "tensorflow"}),
    ):
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(summary))
    out = {
        "tflite_from_torch": cli("export", str(torch_run), "--format", "tflite"),
        "no_weights": cli("export", str(tf_run), "--format", "savedmodel"),
        "bf16": cli("export", str(tf_run), "--format", "savedmodel", "--precision", "bf16"),
    }
    out["tensorflow_imported"] = "tensorflow" in sys.modules
    return out


def main_() -> None:
    root = Path(sys.argv[1])
    result = {"refusals": refusals(root)}
    run = root / "digits"
    train = cli("train", "digits", "--engine", "tensorflow", "--out", str(run), "--max-steps", "40")
    result["train"] = train["code"]
    for fmt in ("savedmodel", "tflite"):
        code = cli("export", str(run), "--format", fmt)["code"]
        artifact = run / "export" / f"digits.{fmt}"
        parity = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
        sidecar = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
        infer = cli("infer", str(artifact), "--recipe-data", "--batch-size", "7")
        with np.load(artifact.with_name(artifact.name + ".predictions.npz")) as npz:
            top1 = npz["top1"]
        result[fmt] = {"code": code, "parity": parity, "sidecar": sidecar, "infer": infer["code"]}
        result[fmt]["predicted"] = top1.tolist()
    result["signature"] = signatures(run / "export")
    fixed = run / "export" / "fixed.savedmodel"
    result["fixed"] = cli(
        "export", str(run), "--format", "savedmodel", "--batch-dim", "50", "--out", str(fixed)
    )
    result["fixed"]["parity"] = json.loads((run / "export" / "fixed.savedmodel.parity.json").read_text())
    result["torch_format_from_tf_run"] = cli("export", str(run), "--format", "onnx")
    result["off_by_half"] = off_by_half(run)
    result["truncated_weights"] = truncated_weights(run, root / "truncated")
    result["tampered_weights"] = tampered_weights(run, root / "tampered")
    result["trust"] = trust(run, root)
    from gpulab.engines.tensorflow.export import keras_recipe

    result["labels"] = keras_recipe("digits", {}).val_data[1].tolist()
    print("RESULT " + json.dumps(result))


def off_by_half(run: Path) -> dict:
    """A SavedModel runtime that adds 0.5 to every output: the parity check must fail, exit 1."""
    from gpulab.engines.tensorflow.formats import savedmodel

    real = savedmodel.load
    savedmodel.load = lambda path: lambda x, run=real(path): run(x) + 0.5
    try:
        out = cli(
            "export", str(run), "--format", "savedmodel", "--out", str(run / "export" / "bad.savedmodel")
        )
    finally:
        savedmodel.load = real
    out["passed"] = json.loads((run / "export" / "bad.savedmodel.parity.json").read_text())["passed"]
    return out


def truncated_weights(run: Path, copy: Path) -> dict:
    copy.mkdir()
    for name in ("summary.json", "model.weights.manifest.json"):
        (copy / name).write_bytes((run / name).read_bytes())
    (copy / "model.weights.h5").write_bytes((run / "model.weights.h5").read_bytes()[:5000])
    return cli("export", str(copy), "--format", "savedmodel")


def tampered_weights(run: Path, copy: Path) -> dict:
    """The trial's case: every value of the first conv kernel changed (by up to 50 %), same file size."""
    import h5py

    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("export", "checkpoints"))
    with h5py.File(copy / "model.weights.h5", "r+") as h5:
        kernels = []
        h5.visititems(lambda name, obj: kernels.append(name) if isinstance(obj, h5py.Dataset) else None)
        first = next(name for name in kernels if len(h5[name].shape) == 4)  # a conv kernel: (3, 3, in, out)
        h5[first][...] = h5[first][...] * np.random.default_rng(0).uniform(0.5, 1.5, h5[first].shape)
    out = cli("export", str(copy), "--format", "savedmodel")
    out["size_same"] = (copy / "model.weights.h5").stat().st_size == (run / "model.weights.h5").stat().st_size
    out["exported"] = (copy / "export").exists()
    return out


def trust(run: Path, root: Path) -> dict:
    """summary.json, the checkpoint's meta.json and the artifact's .export.json naming the trial's payload:
    every verb refuses, nothing runs; the user's own recipe runs when the user says so."""
    from gpulab.checkpoint.io import write_manifest

    marker = root / "PWNED"
    options = {"version": 1, "handlers": {"h": {"()": "os.system", "command": f"touch {marker}"}}}
    bad = root / "payload"
    shutil.copytree(run, bad, ignore=shutil.ignore_patterns("export"))
    summary = json.loads((bad / "summary.json").read_text())
    (bad / "summary.json").write_text(
        json.dumps({**summary, "recipe": PAYLOAD, "config": {"options": options}})
    )
    for step in (bad / "checkpoints").glob("step-*"):
        meta = json.loads((step / "meta.json").read_text())
        (step / "meta.json").write_text(
            json.dumps({**meta, "trajectory": {"recipe": PAYLOAD, "options": options}})
        )
        write_manifest(step, layout="tensorflow")
    out = {"export": cli("export", str(bad), "--format", "savedmodel")}
    out["inspect"] = cli("checkpoint", "inspect", str(bad))
    out["resume"] = cli("train", "digits", "--engine", "tensorflow", "--out", str(bad), "--resume", "latest")
    artifact = run / "export" / "digits.savedmodel"
    sidecar = Path(f"{artifact}.export.json")
    clean = sidecar.read_text()
    sidecar.write_text(json.dumps({**json.loads(clean), "recipe": PAYLOAD, "options": options}))
    out["infer"] = cli("infer", str(artifact), "--recipe-data")
    sidecar.write_text(clean)
    # The user's own module:function (digits under another name) in a run: refused, then allowed.
    (root / "my_tf_digits.py").write_text(
        "from gpulab.engines.tensorflow.recipes import digits\n\ndef build(options):\n    return digits(options)\n"
    )
    sys.path.insert(0, str(root))
    own = root / "own"
    shutil.copytree(run, own, ignore=shutil.ignore_patterns("export", "checkpoints"))
    (own / "summary.json").write_text(
        json.dumps({**json.loads((run / "summary.json").read_text()), "recipe": OWN})
    )
    out["own_refused"] = cli("export", str(own), "--format", "savedmodel")
    out["own_repeated"] = cli("export", str(own), "--format", "savedmodel", "--recipe", OWN)
    out["own_trusted"] = cli("export", str(own), "--format", "savedmodel", "--trust-recipe")
    out["marker"] = marker.exists()
    return out


def signatures(export: Path) -> dict:
    """What TF Serving and a TFLite runtime see: input/output names, dtypes and the batch dimension."""
    import tensorflow as tf

    serve = tf.saved_model.load(str(export / "digits.savedmodel")).signatures["serving_default"]
    (spec,) = serve.structured_input_signature[1].values()
    interp = tf.lite.Interpreter(model_path=str(export / "digits.tflite"))
    return {
        "input_name": list(serve.structured_input_signature[1]),
        "input_shape": spec.shape.as_list(),
        "input_dtype": spec.dtype.name,
        "outputs": list(serve.structured_outputs),
        "tflite_input_shape_signature": interp.get_input_details()[0]["shape_signature"].tolist(),
    }


if __name__ == "__main__":
    main_()
