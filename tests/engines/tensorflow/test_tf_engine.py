"""The TensorFlow engine's loop and ``gpulab train --engine tensorflow``, each check against a reference run: precisions, the fp16 loss scaler,
exact accumulation, MirroredStrategy on 2 logical CPUs (== one device at twice the batch, with clipping),
XLA on/off and its fallback, the NaN stop. All run in one subprocess (tf_scenarios.py): TensorFlow's
import costs seconds, and the CPU must be split into logical devices before TensorFlow initialises."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

# find_spec, not importorskip: TensorFlow is loaded in the subprocess only, never in the pytest process.
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]  # one subprocess: TensorFlow's import and 18 short fits (29-77 s measured on the busy 2-core VM)

SCENARIOS = Path(__file__).with_name("tf_scenarios.py")


@pytest.fixture(scope="module")
def tf_out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tfrun") / "digits"


@pytest.fixture(scope="module")
def checks(tf_out: Path, scenario) -> dict:
    return scenario(SCENARIOS, tf_out)


def test_each_precision_sets_its_policy_and_keeps_the_output_in_float32(checks):
    p = checks["precisions"]
    assert p["fp32"]["policy"] == "float32" and p["fp32"]["tensor_float_32"] is False
    assert p["tf32"]["policy"] == "float32" and p["tf32"]["tensor_float_32"] is True
    assert p["bf16-mixed"]["hidden_compute_dtype"] == "bfloat16"
    assert p["fp16-mixed"]["hidden_compute_dtype"] == "float16"
    assert p["fp16-mixed"]["optimizer"] == "LossScaleOptimizer"
    for name in ("fp32", "tf32", "bf16-mixed", "fp16-mixed"):
        assert p[name]["precision"] == name
        assert p[name]["output_dtype"] == "float32"
        assert 0.0 < p[name]["loss"] < 1.0
    # The same 4 steps in lower precision land close to fp32 (the same model, data and seed).
    assert abs(p["bf16-mixed"]["loss"] - p["fp32"]["loss"]) < 0.02
    assert p["policy_after"] == "float32"  # the process-wide policy is restored after the fit


def test_fp16_overflow_skips_the_step_and_halves_the_scale(checks):
    f = checks["fp16_overflow"]
    assert f["skipped"] == 3
    assert f["scale"] == 2.0**37  # 2**40 halved once per skipped step
    assert f["weights_moved"] == 0.0  # no skipped step touched the weights


def test_accumulation_equals_one_large_batch(checks):
    a = checks["accumulate"]
    assert a["steps"] == 5
    assert a["diff"] < 1e-6  # 2 x 32 accumulated == 64 at once
    assert a["diff_small"] > 1e-3  # while 32 alone differs: the check can tell


def test_mirrored_on_two_logical_cpus_equals_one_device_at_twice_the_batch(checks):
    m = checks["mirrored"]
    assert m["logical_cpus"] == 2 and m["replicas"] == 2 and m["strategy"] == "mirrored"
    assert m["diff"] < 1e-6  # clip_grad_norm on, on the all-reduced gradient
    assert m["clip_changed"] > 1e-4  # and clipping did change the result
    assert m["val"][0] == pytest.approx(m["val"][1])


def test_xla_on_off_and_fallback(checks):
    x = checks["xla"]
    assert x["compiled"] == [True, False]
    assert x["diff"] < 1e-5 and x["fallback_diff"] < 1e-5
    assert x["warning"] and "XLA could not compile the step" in x["warning"][0]


def test_nan_loss_stops_naming_the_step(checks):
    assert checks["nan_stop"] and "became NaN/inf at step" in checks["nan_stop"]


def test_the_clock_leaves_checkpoints_and_validation_out_as_on_torch(checks):
    """The shared loop's clock: once TensorFlow wrote 0.0 here, counting its checkpoints as training."""
    loop = checks["loop_shared"]
    assert loop["checkpoint"]
    assert 0.0 < loop["untimed_s"] < loop["train_seconds"]


def test_a_users_error_in_the_step_is_noted_with_its_step_and_batch_as_on_torch(checks):
    loop = checks["loop_shared"]
    assert "the user's loss is broken" in loop["error"]
    assert loop["notes"] == [
        "gpulab: the fit failed in step 1 (epoch 1, batch 1/20: (32, 20) float32, (32, 1) float32); "
        "no checkpoint (no out_dir or checkpoint_dir to write them to)"
    ]


def test_chargpt_on_tensorflow_is_torchs_model(checks):
    c = checks["chargpt"]
    assert c["parameters"][0] == c["parameters"][1]  # the same architecture, the output tied to the embedding
    assert 0.0 <= c["accuracy"] <= 1.0  # per token, as torch counts it
    assert 2.0 < c["loss"] < 5.0  # near ln(vocab) after 3 steps from GPT-2's small init


def test_cli_digits_on_tensorflow_writes_the_torch_runs_outputs(checks, tf_out: Path, tmp_path: Path):
    from gpulab.engines.torch.train.run import run

    assert checks["cli_digits"] in (0, None)
    # The torch run's own summary, for its field names (no MFU: its peak measurement costs seconds).
    torch_user = {"recipe": "digits", "max_steps": 2, "out_dir": str(tmp_path / "t"), "progress": False}
    _, _, torch_out = run({**torch_user, "mfu": False, "checkpoints": False, "tensorboard": False})
    torch_summary = json.loads((torch_out / "summary.json").read_text())
    assert torch_summary["engine"] == "torch"
    summary = json.loads((tf_out / "summary.json").read_text())
    # (mfu, which a default torch run adds, is a torch callback's FLOP count: not on this engine.)
    missing = set(torch_summary) - set(summary)
    assert not missing, missing
    assert summary["engine"] == "tensorflow" and summary["config"]["engine"] == "tensorflow"
    assert summary["steps"] == 12 and summary["batch_size"] == 64 and summary["world_size"] == 1
    assert (
        summary["device"] == "/CPU:0" and summary["precision"] == "fp32" and summary["strategy"] == "single"
    )
    assert summary["environment"]["tensorflow"].startswith("2.")
    assert summary["parameters"] == torch_summary["parameters"]  # the same architecture
    assert 0.0 < summary["accuracy"] <= 1.0
    records = [json.loads(line) for line in (tf_out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [4, 8, 12]
    assert any("val_accuracy" in r for r in records)
    assert list((tf_out / "tensorboard").glob("events.out.tfevents.*"))
    assert (tf_out / "model.weights.h5").stat().st_size > 4 * summary["parameters"]
    assert not list(tf_out.glob(".tmp-*"))
    # Its manifest (size and sha256) holds the weights file, and it verifies.
    from gpulab.checkpoint.io import verify_files

    manifest = json.loads((tf_out / "model.weights.manifest.json").read_text())
    assert list(manifest["files"]) == ["model.weights.h5"]
    verify_files(tf_out, "model.weights.manifest.json")


def test_your_own_module_function_returning_a_tfrecipe_trains_and_a_torch_recipe_is_one_line(checks):
    user = checks["user_recipe"]
    assert user["code"] == 0 and user["steps"] == 3, user["err"]
    assert user["wrong"] == 2
    lines = user["wrong_err"].strip().splitlines()
    assert len(lines) == 1 and "returned a Recipe, not a TfRecipe" in lines[0], lines
