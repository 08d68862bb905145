"""Faults with several ranks: a stalled rank (every rank exits within timeout + 10 s, naming the stuck rank
and the collective it did not reach), and the watchdog's diagnosis itself, in one process.

The 2-rank NaN/inf tests (skip on all ranks under fp16, stop on all ranks otherwise) share the DDP job
in test_ddp.py; here are their one-process counterparts.
"""

from __future__ import annotations

import io
import json
import re
import time

import ddp_job
import pytest
import torch
import torch.distributed as dist
from torch import nn

from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.engines.torch.distributed.watchdog import (
    ABORT,
    EXIT_CODE,
    HOST,
    PREFIX,
    CollectiveError,
    Watchdog,
)
from gpulab.engines.torch.train.trainer import Trainer

TIMEOUT_S = ddp_job.STALL_TIMEOUT_S  # the stall scenario's limit once every rank is past start-up


@pytest.mark.distributed
@pytest.mark.parametrize("stall_rank", [1, 0])  # 0 also hosts the c10d store
def test_a_stalled_rank_stops_every_rank_naming_it_and_the_collective(tmp_path, stall_rank):
    procs = ddp_job.launch("stall", tmp_path, extra_env={"STALL_RANK": str(stall_rank)})
    codes = ddp_job.wait_all(procs, timeout=90)
    ended = time.time()
    text = ddp_job.logs(tmp_path)
    assert None not in codes, text  # nobody had to be killed
    stalled_at = float((tmp_path / "stalled_at").read_text())
    assert ended - stalled_at < TIMEOUT_S + 10, text
    waiter = 1 - stall_rank
    assert codes[stall_rank] == EXIT_CODE and codes[waiter] == EXIT_CODE
    expected = f"rank {stall_rank} on {HOST} did not reach 'backward (gradient sync)'"
    waiter_log = (tmp_path / f"rank{waiter}.log").read_text()
    assert f"[gpulab rank {waiter}] stalled rank(s) {stall_rank}" in waiter_log and expected in waiter_log
    stuck_log = (tmp_path / f"rank{stall_rank}.log").read_text()
    assert (
        f"[gpulab rank {stall_rank}] stopping: rank {waiter} reported" in stuck_log and expected in stuck_log
    )


@pytest.mark.distributed
def test_a_stalled_rank_is_named_when_collectives_return_at_once_as_on_nccl(tmp_path):
    """Three ranks, asynchronous all-reduces waited on outside any marked region (NCCL's shape): no
    collective blocks where the watchdog looks, yet the stalled rank is named by progress alone."""
    procs = ddp_job.launch("stall_async", tmp_path, world_size=3, extra_env={"STALL_RANK": "1"})
    codes = ddp_job.wait_all(procs, timeout=90)
    ended = time.time()
    text = ddp_job.logs(tmp_path, world_size=3)
    assert codes == [EXIT_CODE] * 3, text  # nobody killed, nobody crashed in the backend's own timeout
    stalled_at = float((tmp_path / "stalled_at").read_text())
    assert ended - stalled_at < ddp_job.ASYNC_TIMEOUT_S + 10, text
    for rank in range(3):
        log = (tmp_path / f"rank{rank}.log").read_text()
        assert f"rank 1 on {HOST} did not reach 'all_reduce (async)' (it has 2 steps done" in log, text


def _watchdogs(store, world=3, **kwargs):
    options = {"exit_fn": lambda code: None, "ack_wait_s": 0.0, **kwargs}
    return [Watchdog(store, r, world, timeout_s=5, out=io.StringIO(), **options) for r in range(world)]


def _publish(dogs):
    for dog in dogs:
        dog._publish()


def test_diagnosis_names_the_ranks_that_did_not_reach_the_collective():
    dogs = _watchdogs(dist.HashStore())
    for dog in dogs:
        dog.heartbeat.step = 7
    for dog in dogs[:2]:  # ranks 0 and 1 reach the all-reduce; rank 2 is stuck before it
        dog.heartbeat.enter("all_reduce(mean)")
    _publish(dogs)
    message = dogs[0].diagnose(dogs[0].heartbeat.state)
    assert "collective 'all_reduce(mean)' failed on rank 0 during step 8" in message
    assert (
        f"rank 2 on {HOST} did not reach 'all_reduce(mean)'" in message
        and "outside any collective" in message
    )
    assert "rank 1" not in message


def test_a_failed_collective_raises_and_tells_the_other_ranks():
    store = dist.HashStore()
    dogs = _watchdogs(store, world=2)
    dogs[0].heartbeat.step = 3
    _publish(dogs)
    failing = dogs[0].collective("barrier")
    with (
        pytest.raises(CollectiveError, match=f"rank 1 on {re.escape(HOST)} did not reach 'barrier'"),
        failing,
    ):
        raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    report = json.loads(dist.PrefixStore(PREFIX, store).get(ABORT))
    assert report["rank"] == 0 and f"rank 1 on {HOST} did not reach 'barrier'" in report["message"]
    exits = []
    dogs[1]._exit_fn = exits.append
    assert dogs[1]._check_abort() and exits == [EXIT_CODE]
    assert "stopping: rank 0 reported" in dogs[1]._out.getvalue()


def test_an_error_that_is_not_a_communication_failure_keeps_its_type():
    store = dist.HashStore()
    dogs = _watchdogs(store, world=2)
    with pytest.raises(ValueError, match="bad hook"), dogs[0].collective("backward (gradient sync)"):
        raise ValueError("bad hook")
    report = json.loads(dist.PrefixStore(PREFIX, store).get(ABORT))
    assert "raised ValueError in 'backward (gradient sync)'" in report["message"]


def test_the_backstop_fires_when_a_collective_neither_returns_nor_raises():
    dogs = _watchdogs(dist.HashStore(), world=2, grace_s=0.0)
    exits = []
    dogs[0]._exit_fn = exits.append
    _publish(dogs)
    dogs[0].heartbeat.enter("barrier")
    seq, name, step, _ = dogs[0].heartbeat.state
    dogs[0].heartbeat.state = (seq, name, step, time.time() - 6)  # entered 6 s ago, timeout 5 s
    dogs[0]._backstop()
    assert exits == [EXIT_CODE] and "declared by the watchdog" in dogs[0]._out.getvalue()


def test_the_watchdog_thread_publishes_heartbeats_and_stops():
    store = dist.HashStore()
    dog = Watchdog(store, 0, 1, timeout_s=1, interval_s=0.01, exit_fn=lambda code: None).start()
    dog.heartbeat.step = 5
    dog.heartbeat.enter("x")
    deadline = time.time() + 5
    view = dist.PrefixStore(PREFIX, store)
    while time.time() < deadline and json.loads(view.get("hb/0"))["step"] != 5:
        time.sleep(0.01)
    dog.stop()
    assert json.loads(view.get("hb/0"))["collective"] == "x"


def test_a_rank_frozen_whole_is_reported_with_its_real_step():
    """SIGSTOP freezes the watchdog thread too, so what the store holds is all a judge will ever know. The
    thread copied the heartbeat once a tick (a second): a rank frozen after its step-48 checkpoint was
    reported with "19 steps done". A step now wakes the thread to publish it (the tick here is 60 s)."""
    dogs = _watchdogs(dist.HashStore(), world=2, interval_s=60.0)
    frozen = dogs[1].start()
    for _ in range(48):
        frozen.heartbeat.step += 1
    deadline = time.monotonic() + 30  # generous: a loaded machine; the next tick would be 60 s away
    while json.loads(frozen.store.get("hb/1"))["step"] != 48:
        assert time.monotonic() < deadline, "step 48 was not published before the next tick"
        time.sleep(0.01)
    frozen._thread = None  # frozen: no final "done" state is published
    frozen._stop.set()
    frozen.heartbeat.stepped.set()
    _progressed(dogs[:1], [60])
    dogs[0]._watch_progress()
    _age(dogs[0], 1, 6.0)
    assert dogs[0]._watch_progress()
    assert (
        f"rank 1 on {HOST} did not reach 'all_reduce (async)' (it has 48 steps done"
        in dogs[0]._out.getvalue()
    )


def _progressed(dogs, steps):
    """Each rank has done ``steps[r]`` steps, each with one (asynchronous: already left) collective."""
    for dog, n in zip(dogs, steps, strict=True):
        while dog.heartbeat.step < n:
            dog.heartbeat.enter("all_reduce (async)")
            dog.heartbeat.leave()
            dog.heartbeat.step += 1
    _publish(dogs)


def _age(dog, rank, seconds):
    """Pretend ``dog`` first saw ``rank`` behind ``seconds`` ago."""
    mark, since = dog._behind[rank]
    dog._behind[rank] = (mark, since - seconds)


def test_progress_names_the_rank_that_stopped_while_the_others_moved_on():
    dogs = _watchdogs(dist.HashStore())
    exits = []
    dogs[0]._exit_fn = exits.append
    _progressed(dogs, [3, 2, 3])  # no rank is inside a collective: nothing blocks where it is marked
    assert not dogs[0]._watch_progress()  # first sight of rank 1 behind starts its clock
    _age(dogs[0], 1, 4.0)
    assert not dogs[0]._watch_progress() and exits == []  # 4 s < collective_timeout_s (5 s)
    _age(dogs[0], 1, 2.0)
    assert dogs[0]._watch_progress() and exits == [EXIT_CODE]
    said = dogs[0]._out.getvalue()
    assert "stalled rank(s) 1, found by rank 0's watchdog" in said
    assert f"rank 1 on {HOST} did not reach 'all_reduce (async)' (it has 2 steps done" in said
    assert "rank 2 did not" not in said
    assert json.loads(dogs[0].store.get(ABORT))["rank"] == 0


def test_a_rank_behind_that_still_progresses_is_not_named():
    dogs = _watchdogs(dist.HashStore())
    _progressed(dogs, [3, 1, 3])
    dogs[0]._watch_progress()
    _age(dogs[0], 1, 60.0)
    _progressed(dogs, [4, 2, 4])  # rank 1 moved: its clock starts again
    assert not dogs[0]._watch_progress()
    assert dogs[0]._behind[1][0] == (2, 2)


def test_a_finished_rank_or_a_long_marked_phase_is_not_a_stall():
    dogs = _watchdogs(dist.HashStore())
    _progressed(dogs, [3, 2, 3])
    dogs[1].stop()  # publishes its final state as done
    dogs[0]._watch_progress()
    assert 1 not in dogs[0]._behind
    dogs = _watchdogs(dist.HashStore())
    _progressed(dogs, [3, 2, 3])
    dogs[1].heartbeat.enter("checkpoint save")  # inside a marked phase with its own, longer limit
    dogs[1].phase_timeout_s = 1800
    _publish(dogs)
    dogs[0]._watch_progress()
    _age(dogs[0], 1, 60.0)
    assert not dogs[0]._watch_progress()
    _age(dogs[0], 1, 1800.0)
    assert dogs[0]._watch_progress()


def test_the_stalled_rank_leaves_the_naming_to_a_rank_that_is_ahead():
    dogs = _watchdogs(dist.HashStore(), world=2, interval_s=1.0)
    exits = []
    dogs[1]._exit_fn = exits.append
    _progressed(dogs, [3, 2])
    dogs[1]._watch_progress()
    _age(dogs[1], 1, 6.0)
    assert not dogs[1]._watch_progress()  # > 5 s, but within its two extra ticks
    _age(dogs[1], 1, 2.0)
    assert dogs[1]._watch_progress() and exits == [EXIT_CODE]


def test_only_the_first_and_last_rank_judge_progress():
    """The others only publish and listen for ``abort``: store reads grow with ranks, not ranks²."""
    dogs = _watchdogs(dist.HashStore(), world=4)
    assert [dog.judge for dog in dogs] == [True, False, False, True]
    _progressed(dogs, [3, 3, 2, 3])
    assert not dogs[1]._watch_progress() and dogs[1]._behind == {}
    dogs[3]._watch_progress()
    _age(dogs[3], 2, 6.0)
    assert dogs[3]._watch_progress()
    assert "stalled rank(s) 2, found by rank 3's watchdog" in dogs[3]._out.getvalue()


def test_a_step_without_a_collective_is_published():
    dogs = _watchdogs(dist.HashStore(), world=1)
    dogs[0]._publish()
    dogs[0].heartbeat.step = 9
    dogs[0]._publish()
    assert json.loads(dogs[0].store.get("hb/0"))["step"] == 9


def _nan_at_step_3():
    calls = [0]

    def loss_fn(out, target):
        calls[0] += 1
        loss = nn.functional.mse_loss(out.float(), target)
        return loss * float("nan") if calls[0] == 3 else loss

    return loss_fn


def _nan_fit(precision: str, **overrides):
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    trainer = Trainer(device="cpu", precision=precision, batch_size=8, epochs=1, progress=False, **overrides)
    model = nn.Linear(4, 1)
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.01)  # noqa: E731
    return trainer, trainer.fit(model, (x, x.sum(1, keepdim=True)), loss_fn=_nan_at_step_3(), optimizer=sgd)


def test_a_nan_loss_stops_a_single_process_run_naming_the_step():
    with pytest.raises(NonFiniteLossError, match=r"NaN/inf at step 3 \(on rank 0\)"):
        _nan_fit("fp32", log_every=4)


def test_under_fp16_a_nan_loss_is_a_skipped_step_not_a_stop():
    trainer, result = _nan_fit("fp16-mixed", log_every=4, init_scale=256.0)
    assert result.steps == 8 and result.skipped_steps == 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
