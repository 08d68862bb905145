"""A functional model built on one named input, fed a dict by that name: neither its run nor its resume
(``--resume latest``, a process of its own as a user runs it) prints Keras's "The structure of `inputs`
doesn't match the expected structure" warning: the fit feeds the model in the structure it was built on."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]
HERE = Path(__file__).resolve().parent
KERAS_WARNING = "structure of `inputs`"


def train(where: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.pop("TF_CONFIG", None)
    argv = [sys.executable, "-m", "gpulab", "train", "named_input_recipe:build", "--engine", "tensorflow",
            "--out", str(where / "run"), "--set", "checkpoint_every=2", "--set", "progress=false", *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=where, timeout=600)


def test_a_named_input_model_runs_and_resumes_without_the_keras_structure_warning(tmp_path):
    first = train(tmp_path, "--max-steps", "4")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = train(tmp_path, "--max-steps", "8", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["resumed_from"].endswith("step-00000004")
    for proc in (first, resumed):
        assert KERAS_WARNING not in proc.stderr + proc.stdout, proc.stderr[-3000:]
