"""Where Float8 training starts to pay: a transformer MLP block (d -> 4d -> d, GELU) forward and backward,
bf16 autocast against torchao's Float8 linears (dynamic scaling), both compiled, over widths d.

    python benchmarks/float8_sweep.py [--widths 768,2048,4096,8192] [--tokens 16384]

Prints ms per step for each and float8 / bf16 as a speed-up (> 1: Float8 is faster). GPT-2-small's width
(768) is where `gpulab bench transformer`'s float8 row ran 0.87x the hand loop (H100, 2026-11-26).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def block(d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).cuda()


def step_ms(model: nn.Module, x: torch.Tensor, repeats: int = 20) -> float:
    compiled = torch.compile(model)

    def one() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            compiled(x).float().pow(2).mean().backward()

    for _ in range(3):  # compile, autotune, warm
        one()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        one()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="768,2048,4096,8192")
    ap.add_argument("--tokens", type=int, default=16384)
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        raise SystemExit("float8_sweep: needs an H100-class GPU (compute capability 9.0 or higher)")
    from torchao.float8 import convert_to_float8_training

    print(f"{'width':>6} {'bf16 ms':>9} {'float8 ms':>10} {'float8/bf16':>12}")
    for d in (int(w) for w in args.widths.split(",")):
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(args.tokens, d, device="cuda", requires_grad=True)
        bf16 = step_ms(block(d), x)
        torch._dynamo.reset()
        torch.manual_seed(0)
        f8 = block(d)
        convert_to_float8_training(f8)
        fp8 = step_ms(f8, x)
        print(f"{d:>6} {bf16:>9.3f} {fp8:>10.3f} {bf16 / fp8:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
