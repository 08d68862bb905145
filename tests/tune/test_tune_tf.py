"""``gpulab tune`` on the TensorFlow engine: its own knobs (precision, batch size, the tf.data cache and
prefetch depth, XLA) measured through TfTrainer, the torch-only knobs listed as not tried with why, and a
tuned.yaml that ``gpulab train --config`` runs on TensorFlow. One subprocess (tf_tune_scenario.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpulab.engines.tensorflow import tune_space as tf_space
from gpulab.engines.tensorflow.data import caches

SCENARIO = Path(__file__).with_name("tf_tune_scenario.py")
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"
)


@pytest.fixture(scope="module")
def done(tmp_path_factory, scenario) -> dict:
    return scenario(SCENARIO, tmp_path_factory.mktemp("tftune"), timeout=300)


@needs_tf
@pytest.mark.slow
def test_tune_measures_the_tensorflow_knobs_and_train_takes_its_config(done):
    doc = done["tune"]
    assert doc["device"] == "cpu" and doc["engine"] == "tensorflow"
    trials = {t["label"]: t for t in doc["trials"]}
    assert trials["default"]["status"] == "ok" and trials["default"]["settings"]["batch_size"] == 64
    tried = {label.split("=")[0] for label in trials if "=" in label}
    skipped = {s["knob"]: s for s in doc["skipped"]}
    # Every TensorFlow knob was measured, or is named as skipped with its reason (a busy machine may run
    # the budget out before XLA).
    for knob in ("batch_size", "data_cache", "prefetch_factor", "compile"):
        assert knob in tried or knob in skipped, (knob, list(trials), doc["skipped"])
    for label, t in trials.items():
        if t["status"] == "ok":
            fig = t["samples_per_s"]
            assert fig["low"] <= fig["value"] <= fig["high"] and fig["repeats"] >= 2, label
    # The pipeline knobs change speed only: the same batches in the same order, so exactly the loss of the
    # trial they were laid over (the best so far: the default, or e.g. bf16-mixed if that won on noise).
    for label, knob in [("data_cache=false", "data_cache"), ("prefetch_factor=1", "prefetch_factor"),
                        ("prefetch_factor=4", "prefetch_factor")]:  # fmt: skip
        trial = trials.get(label)
        if trial is None or trial["status"] != "ok":
            continue
        bases = [
            t for t in doc["trials"]
            if t["settings"].get(knob) != trial["settings"][knob] and t["loss"] is not None
            and _without(t["settings"], knob) == _without(trial["settings"], knob)
        ]  # fmt: skip
        assert bases and all(t["loss"] == trial["loss"] for t in bases), (label, bases)
    if "compile=xla" in trials:  # the step ran through XLA, not the fallback
        assert trials["compile=xla"]["status"] != "failed", trials["compile=xla"]["reason"]
    # The torch knobs with no TensorFlow counterpart: not tried, and why.
    for knob in tf_space.NOT_ON_TENSORFLOW:
        assert skipped[knob]["reason"] == tf_space.NOT_ON_TENSORFLOW[knob]
    # The decisions speak of the engine's own values (AUTOTUNE, xla), not None.
    sentences = " ".join(d["sentence"] for d in doc["decisions"])
    assert "None" not in sentences
    # tuned.yaml keeps the engine and runs under gpulab train as is.
    assert doc["tuned"]["engine"] == "tensorflow"
    assert done["train_code"] == 0
    summary = done["summary"]
    assert summary["engine"] == "tensorflow" and summary["batch_size"] == doc["tuned"].get("batch_size", 64)


def test_the_cache_knob_offers_the_other_of_what_auto_does_and_never_a_cache_over_the_limit():
    import numpy as np

    small = (np.zeros((10, 4), np.float32),)
    assert caches(small, "auto") and not caches(small, False)
    assert [c.settings for c in tf_space.cache_group(small, "auto").candidates] == [{"data_cache": False}]
    assert [c.settings for c in tf_space.cache_group(small, False).candidates] == [{"data_cache": True}]
    big = (np.broadcast_to(np.zeros(1, np.float32), (2**28 + 1,)),)  # a 1 GiB + 4 B view, no memory
    assert not caches(big, "auto")
    group = tf_space.cache_group(big, "auto")
    assert not group.candidates and "over the 1 GiB cache limit" in group.reason


def test_prefetch_depths_are_tried_against_autotune_and_back():
    labels = [c.label for c in tf_space.prefetch_group(None).candidates]
    assert labels == ["prefetch_factor=1", "prefetch_factor=4"]
    back = tf_space.prefetch_group(4).candidates
    assert [c.settings for c in back] == [{"prefetch_factor": 1}, {"prefetch_factor": None}]


def test_tensorflow_devices_map_to_the_devices_the_precision_rules_know():
    assert str(tf_space.torch_device("/CPU:0")) == "cpu"
    assert str(tf_space.torch_device("/GPU:1")) == "cuda:1"


def _without(settings: dict, knob: str) -> dict:
    return {k: v for k, v in settings.items() if k != knob}
