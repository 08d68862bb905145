"""Inductor on CPU computes zero gradients for a conv that feeds a max-pool (seen on torch 2.13.0+cpu).

One forward and backward of ``Conv2d -> ReLU -> MaxPool2d -> Flatten -> Linear -> ReLU``, eager vs
``torch.compile`` (inductor). The forward agrees; the conv's weight and bias gradients come back all zero
compiled (relative difference 1.0), so a CNN trains far worse under ``--compile`` without any error
(gpulab's `digits` recipe: loss 0.326 eager vs 1.588 compiled after 30 AdamW steps).

Root cause, in torch._inductor (no gpulab code involved):
  1. torch 2.13 decomposes ``max_pool2d_with_indices_backward`` into ``zeros`` + ``scatter_add``; inductor
     lowers that to a zero-filled buffer (bufA) and a scatter that mutates it (bufB, "bufB mutates bufA").
  2. The ReLU-backward ``where`` that reads the scattered gradient correctly depends on bufB, but the CPU
     (C++) backend fuses it with the channels-last copy that ``convolution_backward`` wants and, to align
     their loop nests, calls ``SchedulerNode.recompute_size_and_body``. That re-derives the node's reads
     from its loop body, which names the real buffer (bufA), and re-applies the mutation renames only
     when the node has a WeakDep/StarDep (``if fake_deps:``): the dependency on the scatter is lost.
  3. ``reorder_for_peak_memory`` then trusts the dependencies and moves the reader before the scatter:
     the conv backward reads the zero-filled buffer. Small shapes (batch 8) pick another order and agree.

Workaround: ``torch.compile(..., options={"reorder_for_peak_memory": False})`` keeps the scheduler's
original (correct) order; gradients then match eager to ~1e-7. gpulab's ``compile_model`` applies it
to models on the CPU (src/gpulab/engines/torch/runtime/compile.py).

Usage: python benchmarks/inductor_maxpool_repro.py [--workaround] [--device cuda]
Prints the relative gradient difference per parameter; exits 1 when compiled and eager disagree.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


def gradients(model: nn.Module, forward, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    (forward(x) * g).sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workaround", action="store_true", help="compile with reorder_for_peak_memory off")
    parser.add_argument("--device", default="cpu", help="cpu (the C++ backend) or cuda (Triton: unchecked)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(),
    ).to(args.device)  # fmt: skip
    x = torch.rand(64, 32, 4, 4, device=args.device)  # batch 8 does not trigger it: another order
    g = torch.randn(64, 128, device=args.device)
    options = {"reorder_for_peak_memory": False} if args.workaround else None
    eager = gradients(model, model, x, g)
    compiled = gradients(model, torch.compile(model, backend="inductor", options=options), x, g)

    print(f"torch {torch.__version__} on {args.device}, workaround {'on' if args.workaround else 'off'}")
    worst = 0.0
    for name, want in eager.items():
        rel = ((compiled[name] - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
        worst = max(worst, rel)
        zero = bool((compiled[name] == 0).all())
        print(f"  {name:10s} max relative difference {rel:.3g}  (compiled all zero: {zero})")
    agree = worst < 1e-4
    print("compiled and eager gradients", "agree" if agree else "DISAGREE")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
