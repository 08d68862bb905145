"""Each rank resumes its own random stream: 2 gloo ranks whose generators differ (dropout plus
rank-dependent draws), rank 1 killed after the step-8 checkpoint, restarted by ``gpulab launch``
(``--max-restarts 1``, ``resume: auto``): every rank ends bit for bit where the uninterrupted run ends,
and the ranks shared the hashing of the checkpoint they resumed from (each hashed its own share)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from launch_job import gpulab_launch  # noqa: E402

JOB = str(HERE / "rng_resume_job.py")


def _launch(server, out: Path, *extra: str) -> list[dict]:
    r = gpulab_launch("--nproc-per-node", "2", "--max-restarts", "1", "--", JOB, str(out), *extra,
                      timeout=180, server=server)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in range(2)]


@pytest.mark.distributed
@pytest.mark.slow
def test_each_rank_resumes_its_own_rng_bit_exactly(tmp_path, gpulab_server):
    straight = _launch(gpulab_server, tmp_path / "straight")
    resumed = _launch(gpulab_server, tmp_path / "resumed", "--die-after", "8")
    assert not torch.equal(straight[0]["rng"], straight[1]["rng"])  # the ranks' streams do differ
    for rank in range(2):
        assert resumed[rank]["resumed_from"].endswith("step-00000008")
        assert torch.equal(resumed[rank]["rng"], straight[rank]["rng"]), f"rank {rank}'s generator"
        for name, value in straight[rank]["params"].items():
            assert torch.equal(resumed[rank]["params"][name], value), f"rank {rank}: {name}"
    # resuming, each rank hashed its own share of the checkpoint's files, and together all of them, once
    shares = [resumed[rank]["hashed"] for rank in range(2)]
    assert shares[0] and shares[1] and not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == [
        f"step-00000008/{name}" for name in ("meta.json", "model.safetensors", "state.pt")
    ]
