"""Peak memory of one chargpt forward + backward with the whole logits against ``options.chunked_loss=true``,
on any device torch's profiler reads (a CPU included), at GPT-2's vocabulary:

    python benchmarks/chunked_ce_memory.py [--layers 2] [--width 768] [--context 1024] [--batch 1]

The peak is the largest sum of the bytes the step's tensors hold at once, from the allocations and frees
torch's profiler records (``profile_memory``): the allocator's own accounting, not the resident set, so it
is exact and the same on every run. Weights and the batch exist before the step and are not counted. Only
memory here: speed is for a GPU (``gpulab bench transformer``'s ``compile+chunked-ce`` row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile


def peak_allocated_bytes(fn: Callable[[], Any]) -> int:
    """The most bytes held at once by the tensors ``fn`` allocates (its frees included), by the
    allocation records of torch's profiler."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # The raw records: the FunctionEvents fold a record into the op that made it, losing the order.
    records = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    now = peak = 0
    for _, nbytes in records:
        now += nbytes
        peak = max(peak, now)
    return peak


def step_peak(args: argparse.Namespace, chunked: bool, bf16: bool) -> tuple[int, float]:
    """(peak bytes, loss) of one forward + backward of the chargpt model."""
    from gpulab.engines.torch.recipes.chargpt import CharGPT, CharGptOptions, next_char_loss

    options = CharGptOptions(
        n_layer=args.layers, n_head=args.width // 64, n_embd=args.width, block_size=args.context,
        dropout=0.0, chunked_loss=chunked,
    )  # fmt: skip
    torch.manual_seed(0)
    model = CharGPT(args.vocab, options)
    ids = torch.randint(0, args.vocab, (args.batch, args.context + 1))
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    loss: list[float] = []

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            value = next_char_loss(model(x), y)
        value.backward()
        loss.append(value.item())

    return peak_allocated_bytes(step), loss[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    rows = {}
    for precision in ("fp32", "bf16-mixed"):
        for chunked in (False, True):
            peak, loss = step_peak(args, chunked, precision == "bf16-mixed")
            name = f"{precision} {'chunked' if chunked else 'whole logits'}"
            rows[name] = (peak, loss)
            print(f"{name:24s} peak {peak / 2**20:8.1f} MiB, loss {loss:.6f}", flush=True)
    logits = args.batch * args.context * args.vocab * 4
    print(f"the fp32 logits alone: {logits / 2**20:.1f} MiB")
    print(json.dumps({
        "shape": vars(args), "peak_bytes": {k: v[0] for k, v in rows.items()},
        "loss": {k: v[1] for k, v in rows.items()}, "torch": torch.__version__, "cpu": platform.processor(),
        "threads": torch.get_num_threads(), "load_average": os.getloadavg(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
