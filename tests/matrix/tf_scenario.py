"""The matrix lane's TensorFlow cells in one process (TensorFlow's import costs 5-10 s; paid once), run by
test_matrix_tensorflow.py: each cell's recipe module is written, trained to its end through the CLI's entry
point, inspected, then its verb (export with a reload by TensorFlow's own loaders and infer, tune, profile;
the resume cells' kill -9 needs processes of their own, started by the test). Prints ``RESULT {...}``:
per cell, each verb's exit code and stderr, and the checks' figures."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np

from gpulab.cli import main

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from lane import train_argv, write_module  # noqa: E402
from setups import cells  # noqa: E402


def cli(*argv: str) -> list:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except Exception:  # an escaped exception: what a process would print before exit 1
            import traceback

            traceback.print_exc(file=err)
            code = 1
    return [code, err.getvalue()]


def eager(cell, where: Path):
    import tf_parts

    model = tf_parts.MODELS[cell["model"]][0]()
    model(_inputs(cell, 1))  # builds the variables (a subclassed model has none before its first call)
    model.load_weights(str(where / "run" / "model.weights.h5"))
    return model


def _inputs(cell, n: int):
    import tf_parts

    named = tf_parts.example(cell["model"], n)
    if cell["batch"] == "dict" or cell["model"] == "multi_input":
        return dict(named) if cell["batch"] == "dict" else list(named.values())
    return next(iter(named.values()))


def reload(fmt: str, path: Path, names: list[str]):
    """The artifact through TensorFlow's own loaders, not gpulab's: a function of the inputs in ``names``'
    order (matched to the signature's inputs by name; one input whatever its name)."""
    import tensorflow as tf

    def by_name(signature: list[str], xs: list) -> dict:
        if len(signature) == 1:
            return {signature[0]: xs[0]}
        return dict(zip(names, xs, strict=True))

    if fmt == "savedmodel":
        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        signature = list(serve.structured_input_signature[1])
        return lambda xs: next(
            iter(serve(**by_name(signature, [tf.constant(x) for x in xs])).values())
        ).numpy()
    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
    signature = list(runner.get_input_details())
    return lambda xs: next(iter(runner(**by_name(signature, xs)).values()))


def export(cell, where: Path, recipe: str, out: dict) -> None:
    import tf_parts

    model, served = eager(cell, where), None
    for fmt in ("savedmodel", "tflite"):
        art = where / "export" / f"model.{fmt}"
        out["steps"].append([f"export {fmt}", *cli("export", str(where / "run"), "--format", fmt, "--out",
                                                   str(art), "--recipe", recipe)])  # fmt: skip
        if out["steps"][-1][1] != 0:
            continue
        recorded = [i.get("name") for i in json.loads(Path(f"{art}.export.json").read_text())["inputs"]]
        names = recorded if all(recorded) else list(tf_parts.example(cell["model"], 1))
        run = reload(fmt, art, names)
        for n in (1, 3):
            xs = list(tf_parts.example(cell["model"], n).values())
            want = tf_parts.prediction(model(_inputs(cell, n), training=False))
            out["errors"][f"{fmt} batch {n}"] = float(np.abs(run(xs) - want).max())
        served = served or (art, names)
    if served:
        art, names = served
        xs = list(tf_parts.example(cell["model"], 5).values())
        np.savez(where / "inputs.npz", **dict(zip(names, xs, strict=True)))
        out["steps"].append(["infer", *cli("infer", str(art), "--input", str(where / "inputs.npz"), "--out",
                                           str(where / "pred.npz"))])  # fmt: skip
        if out["steps"][-1][1] == 0:
            want = tf_parts.prediction(model(_inputs(cell, 5), training=False))
            out["errors"]["infer"] = float(np.abs(np.load(where / "pred.npz")["output"] - want).max())


def run_cell(cell, where: Path) -> dict:
    where.mkdir(parents=True)
    recipe = write_module(cell, where)
    sys.path.insert(0, str(where))
    out: dict = {"steps": [], "errors": {}}
    argv = train_argv(cell, str(where / "run"))
    out["steps"].append(["train", *cli(*argv)])
    if out["steps"][-1][1] != 0:
        return out
    out["steps"].append(["inspect", *cli("inspect", recipe, "--engine", "tensorflow")])
    verb = cell["verb"]
    if verb == "export":
        export(cell, where, recipe, out)
    elif verb == "tune":
        argv = [
            "tune",
            recipe,
            "--engine",
            "tensorflow",
            "--budget",
            "3",
            "--steps",
            "2",
            "--out",
            str(where / "tune"),
        ]
        out["steps"].append(["tune", *cli(*argv)])
    elif verb == "profile":
        argv = ["profile", recipe, "--engine", "tensorflow", "--warmup", "1", "--steps", "2", "--active", "1"]
        out["steps"].append(["profile", *cli(*argv, "--no-peak", "--out", str(where / "prof"))])
    return out


def main_() -> None:
    root, wanted = Path(sys.argv[1]), set(sys.argv[2:])
    result = {}
    for cell in cells():
        if cell.id in wanted:
            try:
                result[cell.id] = run_cell(cell, root / cell.id)
            except Exception:  # the scenario's own check failed: that cell's test says how
                import traceback

                result[cell.id] = {"steps": [], "errors": {}, "crash": traceback.format_exc()}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main_()
