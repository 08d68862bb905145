"""Run in its own process by test_tf_keras_models.py (one TensorFlow import for every check): a subclassed
Keras model and a two-output one (keras_models_recipe.py) through gpulab's CLI: train, stop and resume,
export to SavedModel and TFLite, infer; runs that fail; a user's mistakes in a dict of losses. Every
check printed on one RESULT line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = Path(sys.argv[1])
shutil.copy(HERE / "keras_models_recipe.py", ROOT / "keras_models_recipe.py")
os.chdir(ROOT)  # a user's recipe is found from the working directory
sys.path.insert(0, str(ROOT))

from gpulab.cli import main  # noqa: E402

SUB, TWO = "keras_models_recipe:subclassed", "keras_models_recipe:two_outputs"
FORMATS = ("savedmodel", "tflite")


def gpulab(*argv: str) -> tuple[int, str]:
    """The CLI's exit code and stderr; an error that is a traceback in a process: 1, and its traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except Exception:
            traceback.print_exc()
            code = 1
    return code, err.getvalue()


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("gpulab: error")]


def train(recipe: str, out: str, steps: int, *extra: str) -> tuple[int, str]:
    return gpulab("train", recipe, "--engine", "tensorflow", "--out", out, "--max-steps", str(steps),
                  "--batch-size", "16", "--set", "progress=false", "--set", "checkpoint_every=4",
                  "--set", "tensorboard=false", "--set", "log_every=1", *extra)  # fmt: skip


def losses(out: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (ROOT / out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def loaded(model, out: str, x: np.ndarray):
    model(x[:1])  # a subclassed model has no variables before its first call
    model.load_weights(str(ROOT / out / "model.weights.h5"))
    return model


def export(run: str, recipe: str, eager) -> dict:
    """Each format: exported, parity, and infer on the recipe's data against the eager model's outputs."""
    got = {}
    for fmt in FORMATS:
        code, err = gpulab("export", run, "--format", fmt, "--recipe", recipe)
        artifact = ROOT / run / "export" / f"{recipe.replace(':', '-')}.{fmt}"
        if code:
            got[fmt] = {"code": code, "err": err[-1500:]}
            continue
        parity = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
        side = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
        infer, infer_err = gpulab(
            "infer", str(artifact), "--recipe-data", "--recipe", recipe, "--out", "p.npz"
        )
        with np.load(ROOT / "p.npz") as npz:
            predicted = {k: npz[k] for k in npz.files}
        want = eager if isinstance(eager, dict) else {"output": eager}
        named = [entry.get("name") for entry in side["inputs"]]
        got[fmt] = {
            "code": code,
            "parity": parity,
            "outputs": side.get("outputs"),
            "input_names": named,
            "signature_inputs": signature_inputs(fmt, artifact),
            "infer_by_name": infer_by_name(artifact, recipe, named, want),
            "infer": [infer, infer_err[-800:] if infer else ""],
            "predicted": sorted(predicted),
            "infer_error": {
                k: float(np.abs(predicted[k] - v).max()) for k, v in want.items() if k in predicted
            },
        }
    return got


def signature_inputs(fmt: str, artifact: Path) -> list[str]:
    """The artifact's input names as TensorFlow's own loaders read its serving signature."""
    import tensorflow as tf

    if fmt == "savedmodel":
        return sorted(
            tf.saved_model.load(str(artifact)).signatures["serving_default"].structured_input_signature[1]
        )
    return sorted(tf.lite.Interpreter(model_path=str(artifact)).get_signature_runner().get_input_details())


def infer_by_name(artifact: Path, recipe: str, names: list, want: dict) -> list:
    """``gpulab infer --input FILE.npz`` of the recipe's validation inputs saved under the names export.json
    gives them: [exit code, stderr's end, largest difference from the eager model's outputs]."""
    from keras_models_recipe import arrays

    if not all(isinstance(n, str) for n in names) or len(names) != 1:
        return [None, f"export.json names {names}", None]
    np.savez(ROOT / "by-name.npz", **{names[0]: arrays(32, 1)[0]})
    code, err = gpulab("infer", str(artifact), "--input", str(ROOT / "by-name.npz"), "--out", "q.npz")
    if code:
        return [code, err[-800:], None]
    with np.load(ROOT / "q.npz") as npz:
        return [code, "", max(float(np.abs(npz[k] - v).max()) for k, v in want.items())]


def subclassed() -> dict:
    from keras_models_recipe import Net, arrays

    out: dict = {"codes": [train(SUB, "sub", 10)[0], train(SUB, "sub-resumed", 7)[0]]}
    out["codes"].append(train(SUB, "sub-resumed", 10, "--resume", "latest")[0])
    x, _ = arrays(32, 1)
    a, b = loaded(Net(), "sub", x), loaded(Net(), "sub-resumed", x)
    out["weights_equal"] = all(
        np.array_equal(p, q) for p, q in zip(a.get_weights(), b.get_weights(), strict=True)
    )
    out["losses"] = [losses("sub"), losses("sub-resumed")]
    out["export"] = export("sub", SUB, a(x, training=False).numpy())
    return out


def failed() -> dict:
    """A run that fails before its first checkpoint (the loss NaN at step 3), one that fails after a
    checkpoint, and a model whose call() raises."""
    out = {"train": train(SUB, "failed", 10, "--set", "options.nan_from=1")[0]}
    out["failed_files"] = sorted(p.name for p in (ROOT / "failed").iterdir())
    for fmt in ("savedmodel", "onnx"):
        out[fmt] = errors(gpulab("export", "failed", "--format", fmt, "--recipe", SUB)[1])
    out["late_train"] = train(SUB, "late", 10, "--set", "options.nan_from=5")[0]  # checkpoint at step 4
    out["late_checkpoints"] = sorted(p.name for p in (ROOT / "late" / "checkpoints").glob("step-*"))
    for fmt in ("savedmodel", "onnx"):
        out[f"late_{fmt}"] = errors(gpulab("export", "late", "--format", fmt, "--recipe", SUB)[1])
    code, err = train(SUB, "call-fails", 4, "--set", "options.fail=true")
    out["call_fails"] = [code, err.strip().splitlines()[-1:]]
    return out


def two_outputs() -> dict:
    import keras
    from keras_models_recipe import WEIGHTS, arrays, two_output_model
    from keras_models_recipe import losses as keras_losses

    out: dict = {}
    for form in ("dict", "list", "summed"):
        code, err = train(TWO, f"two-{form}", 12, "--set", f"options.loss={form}")
        summary = json.loads((ROOT / f"two-{form}" / "summary.json").read_text()) if code == 0 else {}
        out[form] = {"code": code, "err": err[-1500:] if code else "", "summary": summary}
        out[form]["losses"] = losses(f"two-{form}") if code == 0 else {}
    # The validation loss gpulab logged is the one Keras's own compile(loss=dict, loss_weights) computes.
    x, y = arrays(32, 1)
    model = loaded(two_output_model(), "two-dict", x)
    model.compile(loss=keras_losses(), loss_weights=WEIGHTS)
    out["keras_val_loss"] = float(model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)["loss"])
    eager = {k: v.numpy() for k, v in model(x, training=False).items()}
    out["export"] = export("two-dict", TWO, eager)
    out["summed_export"] = {
        fmt: gpulab("export", "two-summed", "--format", fmt, "--recipe", TWO)[0] for fmt in FORMATS
    }
    for mistake in ("bad_key", "weights_alone"):
        code, err = train(TWO, mistake, 2, "--set", f"options.loss={mistake}")
        out[mistake] = [code, errors(err), err.count("Traceback")]
    out["keras"] = keras.__version__
    return out


print("RESULT " + json.dumps({"subclassed": subclassed(), "failed": failed(), "two": two_outputs()}))
