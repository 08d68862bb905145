"""OOM recovery: halve the micro-batch, double accumulation, redo the step; agreed across ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime.oom import MicroBatchOomError, OomGuard, injected_attempts, split_batch
from gpulab.errors import ConfigError

JOB = Path(__file__).resolve().parent / "oom_job.py"


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))


def _batch(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 5, generator=g), torch.randn(n, 1, generator=g)


def _step_fn(model, batch, calls):
    def step(micro_batch: int, accumulate: int) -> float:
        calls.append((micro_batch, accumulate))
        total = 0.0
        for (x, y), weight in split_batch(batch, accumulate):
            loss = nn.functional.mse_loss(model(x), y) * weight
            loss.backward()
            total += float(loss.detach())
        return total

    return step


def _train_one_step(guard: OomGuard, batch) -> tuple[nn.Module, list, float]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    calls: list = []
    loss = guard.run(_step_fn(model, batch, calls), clear_grads=lambda: opt.zero_grad(set_to_none=True))
    opt.step()
    return model, calls, loss


def test_injected_oom_halves_micro_batch_keeps_effective_batch_and_redoes_the_step():
    batch = _batch(8)
    guard = OomGuard(8, 1, inject_oom_at={0})
    model, calls, loss = _train_one_step(guard, batch)
    assert calls == [(8, 1), (4, 2)]
    assert (guard.micro_batch, guard.accumulate) == (4, 2)
    assert guard.micro_batch * guard.accumulate == 8
    [event] = guard.events
    assert (event.micro_batch_before, event.micro_batch, event.accumulate) == (8, 4, 2)
    # The partial gradients of the failed attempt were cleared: the result equals a run that started at 4.
    reference, _, ref_loss = _train_one_step(OomGuard(8, 2), batch)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert loss == pytest.approx(ref_loss)


def test_recovered_step_matches_the_full_batch_step():
    batch = _batch(8)
    recovered, _, _ = _train_one_step(OomGuard(8, 1, inject_oom_at={0, 1}), batch)  # 8 -> 4 -> 2
    full, _, _ = _train_one_step(OomGuard(8, 1), batch)
    for a, b in zip(recovered.parameters(), full.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_odd_batch_splits_unevenly_with_exact_weights():
    x, y = _batch(7)
    parts = split_batch((x, y), 3)
    assert [len(p[0][0]) for p in parts] == [3, 2, 2]
    assert sum(w for _, w in parts) == pytest.approx(1.0)
    guard = OomGuard(7, 1, inject_oom_at={0})
    model, calls, _ = _train_one_step(guard, (x, y))
    assert calls == [(7, 1), (4, 2)]
    full, _, _ = _train_one_step(OomGuard(7, 1), (x, y))
    for a, b in zip(model.parameters(), full.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_real_out_of_memory_error_raised_inside_the_step_is_caught():
    state = {"raised": False}

    def step(micro_batch, accumulate):
        if micro_batch > 2:
            state["raised"] = True
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return micro_batch

    guard = OomGuard(8, 1)
    assert guard.run(step, clear_grads=lambda: None) == 2
    assert state["raised"] and (guard.micro_batch, guard.accumulate) == (2, 4)


def test_other_errors_pass_through_untouched():
    cleared = []

    def step(micro_batch, accumulate):
        raise ValueError("shape mismatch")

    guard = OomGuard(8, 1)
    with pytest.raises(ValueError, match="shape mismatch"):
        guard.run(step, clear_grads=lambda: cleared.append(1))
    assert cleared == [] and guard.events == [] and guard.micro_batch == 8


def test_out_of_memory_at_micro_batch_one_stops_with_a_clear_message():
    def step(micro_batch, accumulate):
        raise torch.OutOfMemoryError("out of memory")

    guard = OomGuard(4, 1)
    with pytest.raises(MicroBatchOomError, match="even at micro-batch 1") as exc:
        guard.run(step, clear_grads=lambda: None)
    assert "\n" not in str(exc.value)
    assert [e.micro_batch for e in guard.events] == [2, 1]


def test_agreement_uses_the_all_reduce_given():
    seen = []

    def all_reduce(t, op):
        seen.append(op)
        return t + (1.0 if len(seen) == 1 else 0.0)  # at the first attempt another rank ran out

    guard = OomGuard(8, 1, all_reduce=all_reduce)
    calls: list = []
    model = _model()
    guard.run(_step_fn(model, _batch(8), calls), clear_grads=lambda: None)
    assert calls == [(8, 1), (4, 2)] and seen == ["sum", "sum"]


def test_bad_settings_and_injection_env():
    with pytest.raises(ConfigError):
        OomGuard(4, 8)
    assert injected_attempts(1, {"GPULAB_INJECT_OOM": "1:0, 0:2,1:3"}) == {0, 3}
    assert injected_attempts(0, {}) == set()
    with pytest.raises(ConfigError, match="RANK:ATTEMPT"):
        injected_attempts(0, {"GPULAB_INJECT_OOM": "x"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed
def test_two_gloo_ranks_halve_together_and_match_a_run_started_small(tmp_path):
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        env.pop("GPULAB_INJECT_OOM", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(JOB), str(tmp_path), "1"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out.decode(errors="replace"))
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in results:
        # Rank 0 did not run out itself, yet it halved too: the decision was agreed.
        assert (r["micro_batch"], r["accumulate"]) == (4, 2)
        assert len(r["oom_recoveries"]) == 1 and r["oom_recoveries"][0]["ranks_out_of_memory"] == 1
        assert r["moved"] > 1e-3  # the steps really trained
        assert r["max_param_diff"] < 1e-5  # equal to plain DDP started at micro-batch 4
    assert results[0]["param_sum"] == pytest.approx(results[1]["param_sum"], rel=1e-7)
