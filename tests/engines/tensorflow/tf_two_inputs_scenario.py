"""Run in its own process by test_tf_two_inputs.py (one TensorFlow import for every check): a two-input
Keras model (two_input_recipe.py) in each data form model.fit takes, through gpulab's CLI: train, stop
and resume, inspect, export; every check printed on one RESULT line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = Path(sys.argv[1])
shutil.copy(HERE / "two_input_recipe.py", ROOT / "two_input_recipe.py")
os.chdir(ROOT)  # a user's recipe is found from the working directory
sys.path.insert(0, str(ROOT))

from gpulab.cli import main  # noqa: E402

RECIPE = "two_input_recipe:build"


def gpulab(*argv: str, stdout: io.StringIO | None = None) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout or io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def train(out: str, form: str, steps: int, *extra: str, batch: int = 16) -> tuple[int, str]:
    return gpulab("train", RECIPE, "--engine", "tensorflow", "--out", out, "--max-steps", str(steps),
                  "--batch-size", str(batch), "--set", f"options.form={form}", "--set", "progress=false",
                  "--set", "checkpoint_every=4", "--set", "tensorboard=false", "--set", "log_every=1", *extra)  # fmt: skip


def weights(out: str) -> list[np.ndarray]:
    from two_input_recipe import model

    form = json.loads((ROOT / out / "summary.json").read_text())["config"]["options"]["form"]
    net = model(named=form != "tuple")
    net.load_weights(str(ROOT / out / "model.weights.h5"))
    return net.get_weights()


def export(run: str, fmt: str) -> dict:
    """Export, then infer by input name: an .npz holding b before a, and the recipe's own data."""
    from two_input_recipe import arrays, model

    code, err = gpulab("export", run, "--format", fmt, "--recipe", RECIPE)
    if code:
        return {"code": code, "err": err[-1500:]}
    artifact = ROOT / run / "export" / f"two_input_recipe-build.{fmt}"
    a, b, _ = arrays(32, 1)  # the validation set
    np.savez(ROOT / "swapped.npz", b=b, a=a)
    by_name, _ = gpulab("infer", str(artifact), "--input", str(ROOT / "swapped.npz"), "--out", "p.npz")
    got = np.load(ROOT / "p.npz")["output"]
    recipe_data, _ = gpulab("infer", str(artifact), "--recipe-data", "--recipe", RECIPE, "--out", "q.npz")
    form = json.loads((ROOT / run / "summary.json").read_text())["config"]["options"]["form"]
    net = model(named=form != "tuple")
    net.load_weights(str(ROOT / run / "model.weights.h5"))
    want = net({"a": a, "b": b} if form != "tuple" else [a, b], training=False).numpy()
    side = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
    return {
        "code": code,
        "parity": json.loads(artifact.with_name(artifact.name + ".parity.json").read_text()),
        "names": [i.get("name") for i in side["inputs"]],
        "infer": [by_name, recipe_data],
        "infer_error": float(np.abs(got - want).max()),
        "same_as_recipe_data": bool(np.array_equal(got, np.load(ROOT / "q.npz")["output"])),
    }


def losses(out: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (ROOT / out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


out: dict = {}
for form in ("dict", "tuple", "dataset"):
    code, err = train(f"{form}-straight", form, 10)
    stopped, _ = train(f"{form}-resumed", form, 7)  # 6 batches an epoch: step 7 lies mid-epoch 2
    resumed, _ = train(f"{form}-resumed", form, 10, "--resume", "latest")
    a, b = weights(f"{form}-straight"), weights(f"{form}-resumed")
    report = io.StringIO()
    inspected, inspect_err = gpulab("inspect", RECIPE, "--engine", "tensorflow", "--batch-size", "16",
                                    "--set", f"options.form={form}", "--json", stdout=report)  # fmt: skip
    totals = json.loads(report.getvalue())["totals"] if inspected == 0 else {}
    exports = {fmt: export(f"{form}-straight", fmt) for fmt in ("savedmodel", "tflite")}
    out[form] = {
        "codes": [code, stopped, resumed],
        "warnings": [line for line in err.splitlines() if "warning" in line],  # at batch 16: none
        "weights_equal": all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)),
        "losses": [losses(f"{form}-straight"), losses(f"{form}-resumed")],
        "inspect": [inspected, inspect_err.strip().splitlines()[-1:] if inspected else inspect_err[-800:]],
        "inspect_flops": [totals.get("flops_forward_per_step"), totals.get("flops_per_step")],
        "export": exports,
        "first_weights": [w.tolist() for w in a[:1]],
    }
code, err = train("rebatched", "dataset", 1, batch=32)  # the dataset's batches are 16
out["rebatched"] = [code, [line for line in err.splitlines() if "warning" in line]]
print("RESULT " + json.dumps(out))
