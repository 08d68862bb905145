"""The Hugging Face example as the README runs it on several processes: `gpulab launch --nproc-per-node 2
-- gpulab train examples.hf_causal_lm:build`, then `--resume latest` to a longer run (2 gloo ranks)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # examples/ is a package at the repository root
sys.path.insert(0, str(HERE.parent / "distributed"))
from launch_job import gpulab_launch, job_env  # noqa: E402

pytest.importorskip("transformers")


def _train(server, out: Path, *flags: str):
    env = job_env(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return gpulab_launch(
        "--nproc-per-node", "2", "--",
        "gpulab", "train", "examples.hf_causal_lm:build", "--out", str(out), "--device", "cpu",
        "--set", "tensorboard=false", "--set", "mfu=false", "--batch-size", "4", *flags,
        env=env, timeout=240, server=server,
    )  # fmt: skip


@pytest.mark.distributed
@pytest.mark.slow
def test_the_hf_example_trains_on_two_ranks_and_resumes(tmp_path, gpulab_server):
    out = tmp_path / "run"
    first = _train(gpulab_server, out, "--max-steps", "3")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _train(gpulab_server, out, "--max-steps", "5", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["resumed_from"].endswith("step-00000003")
    assert summary["world_size"] == 2 and summary["strategy"] == "ddp" and summary["batch_size"] == 4
    assert (out / "checkpoints" / "step-00000005" / "config.json").is_file()  # rank 0 wrote it, unwrapped
    config = json.loads((out / "checkpoints" / "step-00000005" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"]
