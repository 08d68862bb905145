"""Checkpoints and exact resume on the TensorFlow engine (engines/tensorflow/checkpoints.py on the torch side's
storage layer): the run-directory layout, a run stopped at step 7 and resumed to 12 equal to a straight
run of 12 bit for bit (weights, optimizer state, logged loss; mid-epoch, with keep_last pruning), the fp16
loss scale carried over, a tampered file and a changed setting refused in one line. One subprocess
(tf_resume_scenarios.py): TensorFlow's import costs seconds."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]

SCENARIOS = Path(__file__).with_name("tf_resume_scenarios.py")


@pytest.fixture(scope="module")
def checks(tmp_path_factory, scenario) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return scenario(SCENARIOS, tmp_path_factory.mktemp("tfresume"), env=env)


def test_checkpoints_use_the_torch_runs_layout(checks):
    after = checks["after_stop"]
    # checkpoint_every=3 and the end of the fit (step 7); keep_last=2 pruned step 3.
    assert after["dirs"] == ["latest", "step-00000006", "step-00000007"]
    assert after["latest"] == "step-00000007"
    assert after["files"] == ["MANIFEST.json", "ckpt.data-00000-of-00001", "ckpt.index", "meta.json"]
    # Every 3 steps, each epoch end (5, 10) and the end; keep_last unset keeps all.
    straight = ["step-00000003", "step-00000005", "step-00000006", "step-00000009", "step-00000010"]
    assert checks["exact"]["straight_dirs"] == ["latest", *straight, "step-00000012"]


def test_a_stopped_and_resumed_run_equals_a_straight_run_bit_for_bit(checks):
    exact = checks["exact"]
    assert exact["resumed_from"].endswith("resumed/checkpoints/step-00000007")
    assert exact["weights_equal"] and exact["optimizer_equal"]  # np.array_equal, not allclose
    assert exact["final_loss"][0] == exact["final_loss"][1]  # the unread loss window was carried over
    assert exact["history_at_12"][0] == exact["history_at_12"][1]
    assert exact["steps"] == [12, 12] and exact["epochs"] == [3, 3]
    assert exact["dirs_after"] == ["latest", "step-00000010", "step-00000012"]  # keep_last=2


def test_fp16_resume_carries_the_loss_scale(checks):
    fp16 = checks["fp16"]
    assert fp16["weights_equal"]
    assert fp16["loss_scale"][0] == fp16["loss_scale"][1] < 2.0**22  # lowered by the skipped steps
    assert fp16["skipped"][0] == fp16["skipped"][1]
    assert 0 < fp16["skipped"][0] < 8  # some steps skipped, some applied


def test_digits_resumes_its_dropout_masks_and_keeps_its_lr_schedule(checks):
    d = checks["digits"]
    assert d["weights_equal"]  # failed (2e-3 apart) before the seed generators' states were checkpointed
    assert "max_steps 6 -> 8 (the LR schedule was planned for 6 steps" in d["stretched"]
    assert "\n" not in d["stretched"]


def test_resuming_a_finished_run_does_nothing_and_says_so(checks):
    finished = checks["finished"]
    assert finished["weights_equal"]
    assert finished["files_unchanged"] and "metrics.jsonl" in finished["files"]  # a no-op writes nothing
    assert finished["message"].startswith("nothing to do: ") and "step 12 of 12" in finished["message"]


def test_a_tampered_checkpoint_or_a_changed_setting_is_refused_in_one_line(checks):
    tampered = checks["tampered"]
    assert "step-00000012/ckpt.data-00000-of-00001: checksum mismatch" in tampered
    assert "\n" not in tampered
    changed = checks["changed_batch"]
    assert "refused, the run would differ: batch_size 32 -> 16" in changed and "force_resume" in changed
    assert "\n" not in changed


@pytest.fixture(scope="module")
def validation(tmp_path_factory, scenario) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return scenario(
        Path(__file__).with_name("tf_validation_scenario.py"), tmp_path_factory.mktemp("tfval"), env=env
    )


def test_a_failing_validation_leaves_the_epochs_checkpoint_and_resumes_exactly(validation):
    v = validation
    assert v["message"].startswith(
        "validation failed at step 5 (epoch 0): KeyError: 'my_metric'; checkpoint "
    )
    assert v["message"].endswith("step-00000005 holds the training up to it: fix the validation, then continue "
                                 "with --resume latest")  # fmt: skip
    assert v["latest_at_failure"] == "step-00000005"
    assert v["weights_equal"]
