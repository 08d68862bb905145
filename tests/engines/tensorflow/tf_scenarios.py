"""Run in its own process by test_tf_engine.py: every in-process TensorFlow check, printed as one JSON.

One process for all (TensorFlow's import costs seconds on this machine), started before TensorFlow
initialises so the CPU can be split into 2 logical devices for MirroredStrategy.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.engines.tensorflow.devices import split_cpu
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.recipes import mlp
from gpulab.engines.tensorflow.trainer import TfTrainer

tf = require_tensorflow()
split_cpu(tf, 2)  # before anything initialises TensorFlow's devices
QUIET = {"progress": False, "log_every": 2}


def fit(recipe=None, validate=False, **settings):
    recipe = recipe or mlp({"samples": 800})
    if not validate:  # validation traces a second function: only where a check reads it
        recipe.val_data = None
    trainer = TfTrainer(**QUIET, **settings)
    return trainer, trainer.fit(recipe)


def weights(trainer):
    return [w.copy() for w in trainer.model.get_weights()]


def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


FP32_RUN = {}
BATCH64_RUN = {}


def precisions():
    out = {}
    for name in ("fp32", "tf32", "bf16-mixed", "fp16-mixed"):
        trainer, result = fit(precision=name, max_steps=4, batch_size=32)  # fp32's run is xla()'s reference
        if name == "fp32":
            FP32_RUN["weights"] = weights(trainer)  # xla() compares with it
        hidden, last = trainer.model.layers[0], trainer.model.layers[-1]
        out[name] = {
            "precision": result.precision,
            "policy": result.extras["runtime"]["keras_policy"],
            "tensor_float_32": result.extras["runtime"]["tensor_float_32"],
            "hidden_compute_dtype": hidden.dtype_policy.compute_dtype,
            "output_dtype": last.dtype_policy.compute_dtype,
            "loss": result.final_loss,
            "optimizer": type(trainer.optimizer).__name__,
        }
    out["policy_after"] = __import__("keras").mixed_precision.global_policy().name
    return out


def fp16_overflow():
    # A loss scale of 2**40 overflows float16 gradients: each step is skipped and the scale halved.
    trainer, result = fit(precision="fp16-mixed", max_steps=3, batch_size=32, init_scale=2.0**40)
    tf.keras.utils.set_random_seed(0)  # the fit's seed: the same initial weights
    initial = mlp({"samples": 800}).model().get_weights()
    return {
        "skipped": result.skipped_steps,
        "scale": result.extras["runtime"]["loss_scale"],
        "weights_moved": max_diff(weights(trainer), initial),
    }


def accumulate():
    a, _ = fit(max_steps=5, batch_size=64, accumulate=1)
    BATCH64_RUN["weights"] = weights(a)  # mirrored() compares with it
    b, rb = fit(max_steps=5, batch_size=32, accumulate=2)
    c, _ = fit(max_steps=5, batch_size=32, accumulate=1)
    return {
        "diff": max_diff(weights(a), weights(b)),
        "diff_small": max_diff(weights(a), weights(c)),
        "steps": rb.steps,
    }


def mirrored():
    logical = len(tf.config.get_logical_device_configuration(tf.config.list_physical_devices("CPU")[0]))
    one, r1 = fit(max_steps=5, batch_size=64, clip_grad_norm=0.05, validate=True)
    two, r2 = fit(max_steps=5, batch_size=32, clip_grad_norm=0.05, strategy="mirrored", validate=True)
    return {
        "logical_cpus": logical,
        "replicas": r2.extras["runtime"]["replicas"],
        "strategy": r2.strategy,
        "diff": max_diff(weights(one), weights(two)),
        "clip_changed": max_diff(weights(one), BATCH64_RUN["weights"]),  # accumulate(): unclipped
        "val": [r1.accuracy, r2.accuracy],
    }


def xla():
    plain = FP32_RUN["weights"]  # precisions(): the same 4 steps without compile
    jit, rj = fit(max_steps=4, batch_size=32, compile=True)
    recipe = mlp({"samples": 800})
    bce = recipe.loss_fn
    # tf.py_function has no XLA kernel: compilation fails and the step runs as a plain graph.
    recipe.loss_fn = lambda y, out: tf.py_function(lambda a, b: bce(a, b), [y, out], tf.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fell, rf = fit(recipe=recipe, max_steps=4, batch_size=32, compile=True)
    return {
        "compiled": [rj.compiled, rf.compiled],
        "diff": max_diff(plain, weights(jit)),
        "fallback_diff": max_diff(plain, weights(fell)),
        "warning": [str(w.message) for w in caught if "XLA" in str(w.message)][:1],
    }


def nan_stop():
    recipe = mlp({"samples": 800})
    x, y = recipe.train_data
    y = y.copy()
    y[:] = float("nan")  # (a NaN input would vanish in the ReLU)
    recipe.train_data = (x, y)
    try:
        fit(recipe=recipe, max_steps=6, batch_size=32)
    except NonFiniteLossError as exc:
        return str(exc)
    return None


def cli_digits(out: str):
    """``gpulab train digits --engine tensorflow`` as the console script runs it (in this process, which
    has TensorFlow loaded already; the run itself is the CLI's)."""
    from gpulab.cli import main

    sys.argv = ["gpulab", "train", "digits", "--engine", "tensorflow", "--out", out, "--max-steps", "12",
                "--set", "log_every=4"]  # fmt: skip
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    return code


USER_RECIPE = """
import keras
import numpy as np
from gpulab.engines.tensorflow import TfRecipe
from gpulab.core.recipes.base import Recipe

def build(options):
    x = np.random.default_rng(0).normal(size=(256, 6)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=lambda: keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                                        keras.layers.Dense(1, dtype="float32")]),
        train_data=(x, y), loss_fn=lambda y, out: bce(y, out),
        optimizer=lambda total_steps: keras.optimizers.SGD(options.get("lr", 0.1)),
    )

def torch_one(options):
    return Recipe(model=None, train_data=None, loss_fn=None, optimizer=None)
"""


def user_recipe(root: str):
    """Your own ``module:function`` returning a TfRecipe, trained by ``gpulab train --engine tensorflow``;
    one returning a torch Recipe is refused in one line."""
    import contextlib
    import io
    import os
    from pathlib import Path

    from gpulab.cli import main

    here = Path(root).resolve().parent / "user_recipe"
    here.mkdir(parents=True, exist_ok=True)
    (here / "my_keras_recipe.py").write_text(USER_RECIPE)
    os.chdir(here)  # found from the working directory, as torch's user recipes are
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["train", "my_keras_recipe:build", "--engine", "tensorflow", "--out", "run",
                     "--max-steps", "3", "--set", "options.lr=0.05", "--set", "progress=false"])  # fmt: skip
    first_err, err = err.getvalue(), io.StringIO()
    with contextlib.redirect_stderr(err):
        wrong = main(["train", "my_keras_recipe:torch_one", "--engine", "tensorflow", "--out", "run2"])
    summary = json.loads((here / "run" / "summary.json").read_text()) if code == 0 else {}
    return {"code": code, "err": first_err[-500:], "steps": summary.get("steps"), "wrong": wrong,
            "wrong_err": err.getvalue()}  # fmt: skip


def loop_shared(root: str):
    """What the shared loop (core/loop.py) gives this engine as torch's: checkpoints and validation left
    out of the clock (untimed_s), and a user's error noted with its step and batch."""
    _, result = fit(validate=True, max_steps=6, batch_size=32, out_dir=root, checkpoint_every=2)

    def broken_loss(y, out):
        raise ValueError("the user's loss is broken")

    recipe = mlp({"samples": 800})
    recipe.loss_fn = broken_loss
    try:
        fit(recipe=recipe, max_steps=2, batch_size=32)
    except Exception as exc:  # noqa: BLE001 -- the user's error, whatever tf.function made of it
        error, notes = str(exc), list(getattr(exc, "__notes__", []))
    return {
        "untimed_s": result.extras["untimed_s"],
        "train_seconds": result.train_seconds,
        "checkpoint": (Path(root) / "checkpoints").is_dir(),
        "error": error,
        "notes": notes,
    }


def chargpt():
    from gpulab.engines.tensorflow.recipes import chargpt as tf_chargpt
    from gpulab.engines.torch.recipes.chargpt import build as torch_chargpt

    options = {"n_layer": 1, "n_embd": 32, "n_head": 4, "block_size": 16, "max_chars": 4000}
    trainer, result = fit(recipe=tf_chargpt(options), validate=True, max_steps=3, batch_size=16)
    return {
        "parameters": [int(trainer.model.count_params()), torch_chargpt(options).info["parameters"]],
        "accuracy": result.accuracy,
        "loss": result.final_loss,
    }


CHECKS = {f.__name__: f for f in (precisions, fp16_overflow, accumulate, mirrored, xla, nan_stop, chargpt)}

if __name__ == "__main__":
    results = {name: check() for name, check in CHECKS.items()}
    if len(sys.argv) > 1:
        out = sys.argv[1]  # (cli_digits sets sys.argv as the console script has it)
        results["cli_digits"] = cli_digits(out)
        results["user_recipe"] = user_recipe(out)
        results["loop_shared"] = loop_shared(f"{out}-loop")
    print("RESULT " + json.dumps(results))
