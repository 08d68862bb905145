"""A rank SIGKILLed mid-run: torchrun restarts the group, training resumes from the last complete
checkpoint and ends with exactly the parameters of an uninterrupted run.

The job is a hand-written DDP loop on the ``mlp`` recipe (``launch_job.py train``): rank 0 saves
model + optimizer every 5 steps with an atomic rename; rank 1 kills itself before step 17 on the first
attempt only, so the restarted group resumes from step 15 and recomputes steps 15-29.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import JOB, TRAIN, gpulab_launch, reference_run  # noqa: E402


def _same_parameters(a: Path, b: Path) -> bool:
    pa, pb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


@pytest.mark.distributed
def test_killed_rank_restarts_and_resumes_to_the_same_parameters(tmp_path_factory, gpulab_server):
    reference = reference_run(tmp_path_factory.mktemp("launch"), gpulab_server)
    out = tmp_path_factory.mktemp("killed")
    r = gpulab_launch("--nproc-per-node", "2", "--max-restarts", "1", "--", JOB, "train", str(out), *TRAIN,
                      "--kill-at", "17", "--kill-rank", "1", server=gpulab_server)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "killed_rank1_at_step17").exists()  # the kill happened (on the first attempt)
    meta = json.loads((out / "final.json").read_text())
    assert meta == {"resumed_from": 15, "restart_count": 1, "world_size": 2}
    assert json.loads((reference / "final.json").read_text())["resumed_from"] == 0
    assert _same_parameters(out / "final.pt", reference / "final.pt")
