"""A full disk inside TensorFlow's SaveV2 (a real small tmpfs): one line naming the directory and the bytes
needed and free, exit 2, the previous checkpoint kept and resumed. TensorFlow used to raise
``ResourceExhaustedError ... No space left on device [Op:SaveV2]`` as a traceback, outside the disk-full
handling. One subprocess (tf_disk_full_scenario.py) for the three runs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]


def test_a_disk_filling_in_tensorflows_save_is_one_line_and_keeps_the_previous_checkpoint(
    tmp_path, tmpfs, scenario
):
    disk = tmpfs(64 * 2**20)  # the scenario shrinks it once it knows a checkpoint's size
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    out = scenario(Path(__file__).with_name("tf_disk_full_scenario.py"), tmp_path, disk, env=env)
    code, err = out["failed"]
    root = disk / "ck"
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(
        f"gpulab: error: {root}: no space left on the device to write checkpoint step-00000008"
    )
    assert "bytes, " in err and " are free" in err and "step-00000004 stays the latest checkpoint" in err
    assert out["left"] == ["latest", "step-00000004"]  # no .tmp-*, no lock left
    assert out["resumed"][0] == 0, out["resumed"][1]
    assert out["steps"] == 12 and out["resumed_from"] == str(root / "step-00000004")
