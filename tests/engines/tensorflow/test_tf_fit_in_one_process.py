"""A TensorFlow fit's result does not depend on what ran before it in the process (found by the matrix
lane): ``gpulab train`` twice in one process ends both times on the weights the same run ends on in a
fresh process, bit for bit. The recipe's data is a tf.data pipeline shuffled with an op seed, which
TensorFlow pairs with its global seed as the pipeline is made: unset in a fresh process, the previous fit's
seed after one, until the run seeded before building its recipe."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]
SCENARIO = os.path.join(os.path.dirname(__file__), "tf_repeat_fit_scenario.py")


def test_two_fits_in_one_process_end_on_a_fresh_process_weights(tmp_path, scenario):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    (fresh,) = scenario(SCENARIO, tmp_path / "fresh", 1, env=env)
    first, second = scenario(SCENARIO, tmp_path / "twice", 2, env=env)
    assert fresh and first == fresh
    assert second == fresh, "the second fit in the process ended on other weights than a fresh process's"
