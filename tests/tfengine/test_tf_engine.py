"""The TensorFlow engine's loop, each check against a reference run: precisions, the fp16 loss scaler,
exact accumulation, MirroredStrategy on 2 logical CPUs (== one device at twice the batch, with clipping),
XLA on/off and its fallback, the NaN stop. All run in one subprocess (tf_scenarios.py): TensorFlow's
import costs seconds, and the CPU must be split into logical devices before TensorFlow initialises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

SCENARIOS = Path(__file__).with_name("tf_scenarios.py")


@pytest.fixture(scope="module")
def checks() -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS)], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


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
    assert x["compiled"] == [False, True, False]
    assert x["diff"] < 1e-5 and x["fallback_diff"] < 1e-5
    assert x["warning"] and "XLA could not compile the step" in x["warning"][0]


def test_nan_loss_stops_naming_the_step(checks):
    assert checks["nan_stop"] and "became NaN/inf at step" in checks["nan_stop"]
