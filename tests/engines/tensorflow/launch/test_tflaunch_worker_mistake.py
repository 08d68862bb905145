"""A mistake only the TensorFlow workers meet under `gpulab launch --engine tensorflow -- gpulab train`: its
one line, said once by the launcher, exit 2 (as under torchrun: tests/cli/test_cli_launch_rank_mistake.py);
it was each worker's line, then the launcher's 'worker 1 exited with code 2' line, exit 1."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tf_numpy_recipe import NUMPY_RECIPE

ROOT = Path(__file__).resolve().parents[4]

# the user's recipe, failing where a worker runs it (the launcher checks the command once before any starts)
RECIPE = """
import json
import os

from np_recipe import build as np_build


def build(options):
    config = os.environ.get("TF_CONFIG")
    if config and str(json.loads(config)["task"]["index"]) in options.get("workers", "").split(","):
        raise FileNotFoundError("/data/part-1.csv is missing on this node")
    return np_build(options)
"""


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
@pytest.mark.parametrize("workers", ["1", "0,1"], ids=["one-worker", "every-worker"])
def test_a_mistake_in_the_workers_is_one_line_once_exit_2(tmp_path, workers):
    (tmp_path / "np_recipe.py").write_text(NUMPY_RECIPE)
    (tmp_path / "node_recipe.py").write_text(textwrap.dedent(RECIPE))
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    env |= {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)]), "CUDA_VISIBLE_DEVICES": ""}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = ["launch", "--engine", "tensorflow", "--nproc-per-node", "2", "--", "gpulab", "train",
            "node_recipe:build", "--engine", "tensorflow", "--out", "run", "--max-steps", "2",
            "--set", f"options.workers='{workers}'"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "gpulab", *argv], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("gpulab")]
    assert said[-1] == (
        "gpulab: error: recipe 'node_recipe:build': build(options) raised FileNotFoundError: /data/part-1.csv "
        "is missing on this node (--debug shows the traceback)"
    ), proc.stderr
    assert sum("part-1.csv" in line for line in proc.stderr.splitlines()) == 1, proc.stderr  # once
    assert "exited with code" not in proc.stderr, proc.stderr
