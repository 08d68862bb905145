"""FSDP2 (``fully_shard``) with 2 Gloo ranks on CPU: same result as one process at the global batch,
sharded checkpoints through torch.distributed.checkpoint with the usual manifest, and exact resume.

torch 2.13's FSDP2 runs on CPU with Gloo (all-gather and reduce-scatter of fp32 shards), so this needs no
GPU; on a torch without ``fully_shard`` the test is skipped.
"""

from __future__ import annotations

import json

import ddp_job
import pytest
import torch
from torch import nn

from gpulab.engines.torch.measure.flops import training_step_flops
from gpulab.engines.torch.state.api import inspect_checkpoint
from gpulab.engines.torch.train.trainer import Trainer

fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)", allow_module_level=True)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2")
    codes = ddp_job.wait_all(ddp_job.launch("fsdp2,fsdp2_tied", out), timeout=150)
    assert codes == [0, 0], ddp_job.logs(out)
    return out, [torch.load(out / f"rank{r}.pt")["fsdp2"] for r in range(2)]


@pytest.mark.distributed
def test_fsdp2_with_tied_weights_trains_and_counts_flops_on_the_first_step(job):
    out, _ = job
    r0, r1 = (torch.load(out / f"rank{r}.pt")["fsdp2_tied"] for r in range(2))
    assert r0["steps"] == r1["steps"] == 4 and r0["loss"] == pytest.approx(r1["loss"])
    x, y = ddp_job.tokens()
    want = training_step_flops(ddp_job.TiedLM(), nn.functional.cross_entropy, (x[:16], y[:16]))
    assert r0["flops_per_sample"] == want.per_sample  # the same count as tracing the unsharded model


@pytest.mark.distributed
def test_fsdp2_two_ranks_equal_one_rank_at_twice_the_batch_and_resume_exactly(job):
    out, (r0, r1) = job
    trainer = Trainer(strategy="single", **ddp_job.settings(batch_size=32))
    trainer.fit(
        ddp_job.Blocks(), ddp_job.dataset(), loss_fn=nn.functional.cross_entropy, optimizer=ddp_job.sgd
    )
    reference = trainer.model.state_dict()
    assert r0["steps"] == 8 and r1["params"] == {}  # the full state is gathered on rank 0 only
    assert r0["params"].keys() == reference.keys()
    for name, value in reference.items():
        torch.testing.assert_close(r0["params"][name], value, rtol=0, atol=1e-5, msg=name)
    # Resumed from the sharded step-4 checkpoint, a fresh model ends exactly where the whole run did.
    assert r0["resumed_from"].endswith("step-00000004")
    for name, value in r0["params"].items():
        torch.testing.assert_close(r0["resumed_params"][name], value, rtol=0, atol=0, msg=name)


@pytest.mark.distributed
def test_fsdp2_checkpoint_is_sharded_with_a_manifest_over_every_shard(job):
    out, _ = job
    step = out / "fsdp2" / "checkpoints" / "step-00000004"
    names = sorted(p.name for p in step.iterdir())
    assert names == [".metadata", "MANIFEST.json", "__0_0.distcp", "__1_0.distcp", "meta.json", "state.pt"]
    manifest = json.loads((step / "MANIFEST.json").read_text())
    assert manifest["layout"] == "sharded"
    assert set(manifest["files"]) == set(names) - {"MANIFEST.json"}
    report = inspect_checkpoint(step)
    assert report["valid"], report["problems"]
    assert not list((out / "fsdp2" / "checkpoints").glob(".tmp-*"))
