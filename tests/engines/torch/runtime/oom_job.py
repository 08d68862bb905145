"""One rank of the two-process OOM-recovery test (run by tests/engines/torch/runtime/test_oom.py, gloo on CPU).

Each rank trains the same DDP model two ways for two optimizer steps on its own data (8 samples a
step): guarded by ``OomGuard`` starting at micro-batch 8, with an out-of-memory error injected on rank
``--oom-rank`` at the first attempt; and the reference, plain DDP accumulation started at micro-batch
4 (gradients synchronised by DDP in the last backward). It writes ``rank{N}.json``: the guard's
summary and the largest parameter difference between the two runs, and the guarded parameters' sum
(equal on both ranks if they stayed in step).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gpulab.engines.torch.distributed.process_group import init_process_group
from gpulab.engines.torch.runtime.oom import OomGuard, split_batch, sync_gradients

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


def all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
    out = tensor.detach().clone()
    dist.all_reduce(out, op=_OPS[op])
    return out / dist.get_world_size() if op == "mean" else out


def make_model() -> DDP:
    torch.manual_seed(0)
    return DDP(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1)))


def data(rank: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)) for _ in range(steps)]


def guarded(batches, oom_rank: int) -> tuple[DDP, OomGuard]:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rank = dist.get_rank()
    guard = OomGuard(8, 1, all_reduce=all_reduce, rank=rank, inject_oom_at={0} if rank == oom_rank else set())

    for batch in batches:

        def step(micro_batch: int, accumulate: int, batch=batch) -> None:
            # Every micro-batch under no_sync: a rank that ran out must not leave the others in DDP's
            # all-reduce. The gradients are reduced after the guard agreed.
            for (x, y), weight in split_batch(batch, accumulate):
                with model.no_sync():
                    loss = nn.functional.mse_loss(model(x), y) * weight
                    loss.backward()

        guard.run(step, clear_grads=lambda: opt.zero_grad(set_to_none=True))
        sync_gradients(model.parameters(), all_reduce)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, guard


def reference(batches) -> DDP:
    """Plain DDP accumulation at micro-batch 4 x 2: sync in the last micro-batch's backward."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches:
        parts = split_batch(batch, 2)
        for i, ((x, y), weight) in enumerate(parts):
            last = i == len(parts) - 1
            with model.no_sync() if not last else torch.enable_grad():
                (nn.functional.mse_loss(model(x), y) * weight).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model


def main() -> None:
    out, oom_rank = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    init_process_group(torch.device("cpu"), 300.0)  # as Runtime joins: stores on loopback only
    rank = dist.get_rank()
    batches = data(rank, steps=2)
    model, guard = guarded(batches, oom_rank)
    ref = reference(batches)
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    result = {
        "rank": rank,
        **guard.summary(),
        "max_param_diff": diff,
        "param_sum": float(sum(p.double().sum() for p in model.parameters())),
        "moved": max(
            (p - q).abs().max().item()
            for p, q in zip(model.parameters(), make_model().parameters(), strict=True)
        ),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
