"""`gpulab launch --max-restarts 1 -- gpulab train ...`: a rank dies mid-run, torchrun restarts the group,
and the restarted attempt continues from the last checkpoint (``resume: auto``, the default under launch)
to exactly the weights of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from launch_job import gpulab_launch, job_env  # noqa: E402

STEPS, EVERY, DIES_AFTER = 40, 10, 20


def _train(server, out: Path, exit_after: int):
    env = job_env(PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return gpulab_launch(
        "--nproc-per-node", "2", "--max-restarts", "1", "--",
        "gpulab", "train", "restart_recipe:build", "--out", str(out), "--max-steps", str(STEPS),
        "--set", f"checkpoint_every={EVERY}", "--set", "keep_last=null", "--set", "tensorboard=false",
        "--set", "mfu=false", "--set", f"options.exit_after_step={exit_after}",
        env=env, timeout=240, server=server,
    )  # fmt: skip


@pytest.mark.distributed
@pytest.mark.slow
def test_a_restarted_launch_resumes_and_ends_on_the_uninterrupted_weights(tmp_path, gpulab_server):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    r = _train(gpulab_server, reference, exit_after=0)
    assert r.returncode == 0, r.stderr[-3000:]
    r = _train(gpulab_server, killed, exit_after=DIES_AFTER)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exitcode: 3" in r.stderr  # the first attempt failed (torchrun logs it, then restarts)
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert summary["resumed_from"].endswith(f"step-{DIES_AFTER:08d}")  # continued, did not start over
    final = f"checkpoints/step-{STEPS:08d}/model.safetensors"
    a, b = load_file(reference / final), load_file(killed / final)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
