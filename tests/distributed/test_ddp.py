"""DDP with real processes (2 Gloo ranks on CPU), and the rank sharding of the data, strategy selection and
DataParallel in one process.

The 2-rank job runs once per module (``ddp_job.py ddp,accumulate,nan16,nan32``); each test reads its part.
"""

from __future__ import annotations

import importlib
import json
import warnings

import ddp_job
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from gpulab.engines.torch.data import make_loader
from gpulab.engines.torch.data.loaders import EpochSampler
from gpulab.engines.torch.data.tensor_batches import num_batches
from gpulab.engines.torch.distributed.process_group import LaunchEnv
from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.strategies import _auto_strategy, resolve_strategy
from gpulab.engines.torch.runtime.strategies.data_parallel import DataParallelPerformanceWarning
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError

TOL = 1e-5


def _single_reference(**overrides):
    """One process at the global batch (2 x 16): what DDP must reproduce."""
    model = ddp_job.Recorder()
    trainer = Trainer(strategy="single", **ddp_job.settings(batch_size=32, **overrides))
    trainer.fit(model, ddp_job.dataset(), loss_fn=nn.functional.cross_entropy, optimizer=ddp_job.sgd)
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, model.seen


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    procs = ddp_job.launch("ddp,accumulate,nan16,nan32,stream,dict", out)
    codes = ddp_job.wait_all(procs, timeout=150)
    assert codes == [0, 0], ddp_job.logs(out)
    return out, [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.fixture(scope="module")
def reference():
    return _single_reference()


def _assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=TOL, msg=name)


# -- the 2-rank job -------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_ddp_two_ranks_equal_one_rank_at_twice_the_batch(job, reference):
    _, (r0, r1) = job
    assert r0["ddp"]["strategy"] == "ddp" and r0["ddp"]["world_size"] == 2
    assert r0["ddp"]["steps"] == 8
    _assert_close(r0["ddp"]["params"], reference[0])
    _assert_close(r1["ddp"]["params"], r0["ddp"]["params"])  # replicas stay identical


@pytest.mark.distributed
def test_dict_batches_and_a_model_computing_its_own_loss_train_as_tuples_do(job, reference):
    """Dict batches are sharded like tuples (the dict-of-tensors fast path), the model's own loss replaces
    loss_fn, and the 2-rank result is the one-process result at twice the batch."""
    _, (r0, r1) = job
    _assert_close(r0["dict"]["params"], reference[0])
    _assert_close(r1["dict"]["params"], r0["dict"]["params"])
    assert r0["dict"]["seen"] == r0["ddp"]["seen"] and r1["dict"]["seen"] == r1["ddp"]["seen"]
    assert r0["dict"]["samples"] == r1["dict"]["samples"] == ddp_job.SAMPLES  # per rank, 2 epochs of halves
    assert r0["dict"]["names"] == list(reference[0])  # the factory saw the user's names, no "module."
    assert r0["dict"]["accuracy"] is not None


@pytest.mark.distributed
def test_ranks_see_disjoint_halves_of_each_global_batch_and_epochs_reshuffle(job, reference):
    _, (r0, r1) = job
    seen0, seen1, global_batches = r0["ddp"]["seen"], r1["ddp"]["seen"], reference[1]
    assert len(seen0) == len(seen1) == len(global_batches) == 8
    for a, b, whole in zip(seen0, seen1, global_batches, strict=True):
        assert not set(a) & set(b)
        assert a + b == whole  # rank r takes the r-th contiguous half of the same global batch
    epoch_orders = [
        [i for step in range(e * 4, e * 4 + 4) for i in seen0[step] + seen1[step]] for e in range(2)
    ]
    assert all(sorted(order) == list(range(ddp_job.SAMPLES)) for order in epoch_orders)
    assert epoch_orders[0] != epoch_orders[1]  # set_epoch reshuffled


@pytest.mark.distributed
def test_only_rank_zero_writes_shared_files(job):
    out, _ = job
    records = [json.loads(line) for line in (out / "ddp" / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if "loss" in r]
    assert train_steps == list(range(1, 9))  # each step once: rank 1 wrote nothing
    assert sum("val_loss" in r for r in records) == 2
    ckpts = out / "ddp" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-00000004", "step-00000008"]
    assert not list(out.glob("**/.tmp-*"))
    assert (out / "rank1.log").read_text() == ""  # rank 1 printed nothing


@pytest.mark.distributed
def test_accumulation_with_no_sync_equals_the_synchronous_result(job, reference):
    _, (r0, r1) = job
    acc = r0["accumulate"]
    # 2 ranks x 8 samples x 2 micro-batches per step = the same 32 samples as one rank at batch 32.
    _assert_close(acc["params"], reference[0])
    _assert_close(r1["accumulate"]["params"], acc["params"])
    # One gradient all-reduce per optimizer step (the model fits one bucket): the first micro-batch of
    # each step ran under no_sync. Without it there would be 16.
    assert acc["steps"] == 8 and acc["allreduce_calls"] == 8


@pytest.mark.distributed
def test_a_second_fit_over_the_same_group_checkpoints_independently(job):
    out, _ = job
    ckpts = out / "accumulate" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-00000004", "step-00000008"]


@pytest.mark.distributed
def test_uneven_streams_stop_every_rank_together_each_pass(job):
    _, ranks = job
    r0, r1 = (r["stream"] for r in ranks)
    assert r0["steps"] == r1["steps"] == 10 and r0["epochs"] == r1["epochs"] == 3  # passes of 4 steps
    _assert_close(r0["params"], r1["params"])  # DDP kept them in step: no rank trained alone
    first_pass = [ids for ids in r0["seen"][:4]]
    assert [ids[0] for ids in first_pass] == [0, 8, 16, 24]  # rank 0's batches 5 and 6 were not trained
    assert [ids[0] for ids in r0["seen"][4:8]] == [0, 8, 16, 24]  # the next pass starts over
    assert [ids[0] for ids in r1["seen"][:4]] == [64, 72, 80, 88]


@pytest.mark.distributed
def test_fp16_nan_on_one_rank_skips_the_step_on_every_rank(job):
    _, (r0, r1) = job
    for r in (r0, r1):
        assert r["nan16"]["skipped"] == 1 and r["nan16"]["steps"] == 4
        assert all(torch.isfinite(v).all() for v in r["nan16"]["params"].values())
    _assert_close(r1["nan16"]["params"], r0["nan16"]["params"])


@pytest.mark.distributed
def test_fp32_nan_on_one_rank_stops_every_rank_naming_the_step(job):
    _, (r0, r1) = job
    for r in (r0, r1):
        assert r["nan32"]["error"] is not None
        assert f"step {ddp_job.NAN_STEP} (on rank 1)" in r["nan32"]["error"]
    # Both stopped at the same metrics read (log_every=2: the step after the bad one).
    assert r0["nan32"]["stopped_at"] == r1["nan32"]["stopped_at"] == ddp_job.NAN_STEP + 1


# -- sharding, in one process ---------------------------------------------------------------------------


def _ids(source) -> list[list[int]]:
    return [batch[-1].tolist() for batch in source]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("samples", [37, 40, 3])
def test_rank_shards_are_disjoint_equal_in_count_and_cover_the_epoch(samples, drop_last):
    data = (torch.randn(samples, 2), torch.arange(samples))
    kwargs = {"batch_size": 4, "device": "cpu", "seed": 3, "drop_last": drop_last}
    ranks = [_ids(make_loader(data, rank=r, world_size=3, **kwargs)) for r in range(3)]
    lengths = {len(r) for r in ranks}
    assert lengths == {num_batches(samples, 4, drop_last, 3)}  # same count: nobody waits at the end
    for step in zip(*ranks, strict=True):
        assert len({len(b) for b in step}) == 1  # and equal sizes
    flat = [i for r in ranks for b in r for i in b]
    if drop_last:
        assert len(flat) == len(set(flat)) == (samples // 12) * 12
    else:  # padded: everything once, plus at most world_size - 1 repeats
        assert set(flat) == set(range(samples)) and len(flat) - samples <= 2
    one = _ids(make_loader(data, rank=0, world_size=1, **{**kwargs, "batch_size": 12}))
    assert [sum((r[i] for r in ranks), []) for i in range(len(one))][: len(one) - 1] == one[:-1]


def test_single_process_keeps_its_partial_last_batch():
    data = (torch.randn(10, 2), torch.arange(10))
    assert [len(b) for b in _ids(make_loader(data, batch_size=4, device="cpu"))] == [4, 4, 2]


class Rows(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([float(i)]), torch.tensor(i)


def test_dataset_path_shards_like_the_fast_path_and_resumes():
    kwargs = {"batch_size": 3, "device": "cpu", "seed": 1, "rank": 1, "world_size": 2}
    fast = make_loader((torch.arange(23.0)[:, None], torch.arange(23)), **kwargs)
    slow = make_loader(Rows(23), **kwargs)
    epoch0 = _ids(fast)
    assert epoch0 == _ids(slow) and len(epoch0) == 4
    assert len(EpochSampler(23, shuffle=True, seed=1, batch_size=3, rank=1, world_size=2)) == 12
    slow.load_state_dict({"epoch": 0, "batches_consumed": 2})
    assert _ids(slow) == epoch0[2:]


def test_a_users_dataloader_gets_a_distributed_sampler():
    loader = DataLoader(TensorDataset(torch.arange(20.0), torch.arange(20)), batch_size=4, shuffle=True)
    shards = [make_loader(loader, batch_size=4, device="cpu", rank=r, world_size=2, seed=4) for r in range(2)]
    assert all(isinstance(s.loader.sampler, DistributedSampler) for s in shards)
    first = [_ids(s) for s in shards]
    assert not set(sum(first[0], [])) & set(sum(first[1], []))
    assert len(first[0]) == len(first[1]) == 3
    second = [_ids(s) for s in shards]  # next epoch: set_epoch reshuffles
    assert second != first


# -- strategy selection and DataParallel -----------------------------------------------------------------


def test_auto_picks_ddp_when_launched_as_several_processes(monkeypatch):
    for key, value in {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(key, value)
    name, reason = _auto_strategy(torch.device("cpu"))
    assert name == "ddp" and "4 processes" in reason
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert _auto_strategy(torch.device("cpu"))[0] == "single"


def test_a_multi_process_strategy_without_a_launch_says_how_to_launch(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(Exception, match="gpulab launch"):
        resolve_strategy("ddp", "cpu")


@pytest.mark.parametrize("gpu_present", [False, True])
def test_data_parallel_runs_and_warns_that_ddp_is_faster(monkeypatch, gpu_present):
    # On a machine with a GPU, strategy dp with device cpu once failed inside nn.DataParallel
    # (device_ids[0] of an empty list): seen on an H100, 2026-11-23. Faked here by what torch asks.
    torch_dp = importlib.import_module("torch.nn.parallel.data_parallel")

    monkeypatch.setattr(torch_dp, "_get_available_device_type", lambda: "cuda" if gpu_present else None)
    with pytest.warns(DataParallelPerformanceWarning, match="slower than ddp.*GIL.*gpulab launch"):
        rt = Runtime("cpu", precision="fp32", strategy="dp")
    model, opt = rt.setup(nn.Linear(3, 1), lambda ps: torch.optim.SGD(ps, lr=0.1))
    assert type(model) is nn.Linear  # nothing to replicate on a CPU
    x = torch.randn(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rt.backward(nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)))
    rt.step(opt)
    assert set(rt.strategy.model_state_dict(model)) == {"weight", "bias"}  # no "module." prefix
    assert type(rt.strategy.unwrap(model)) is nn.Linear


def test_launch_env_reads_torchrun_variables_and_names_missing_ones():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    assert LaunchEnv.from_env(env) == LaunchEnv(1, 2, 1, "127.0.0.1", 29500)
    assert LaunchEnv.from_env({}) is None
    with pytest.raises(ConfigError, match="RANK, MASTER_ADDR, MASTER_PORT"):
        LaunchEnv.from_env({"WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match="outside"):
        LaunchEnv.from_env({**env, "RANK": "2"})
