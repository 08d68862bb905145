"""Parity: does the artifact, run in its own runtime, compute what the eager PyTorch model computes?

Reported for every export: the largest absolute difference, the same relative to the largest eager output,
the share of elements within ``atol + rtol * |eager|`` and, where the target is a class index per output
row (a classifier, or a language model's next token), the accuracy of both and the share of equal top-1
predictions. The tolerances are per precision: fp32 runtimes differ only in summation order; bf16/fp16
ones may also fuse or keep intermediates at another width.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpulab.errors import ParityError


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    min_top1_agreement: float


TOLERANCES = {
    "fp32": Tolerance(atol=1e-4, rtol=1e-3, min_top1_agreement=0.999),
    "bf16": Tolerance(atol=5e-2, rtol=5e-2, min_top1_agreement=0.99),
    "fp16": Tolerance(atol=1e-2, rtol=1e-2, min_top1_agreement=0.99),
}


def is_classifier(output: torch.Tensor, target: torch.Tensor | None) -> bool:
    return (
        target is not None
        and not target.is_floating_point()
        and output.dim() >= 2
        and tuple(output.shape[:-1]) == tuple(target.shape)
    )


def accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
    keep = target != -100  # the ignore index of cross-entropy, as the Trainer's accuracy
    return float((output.argmax(-1)[keep] == target[keep]).float().mean())


def compare(eager: torch.Tensor, got: torch.Tensor, target: torch.Tensor | None, precision: str) -> dict:
    tol = TOLERANCES[precision]
    if eager.shape != got.shape:
        return {"passed": False, "problem": f"output shape {tuple(got.shape)} != eager {tuple(eager.shape)}"}
    eager, got = eager.double(), got.double()
    diff = (got - eager).abs()
    scale = float(eager.abs().max()) or 1.0
    within = float((diff <= tol.atol + tol.rtol * eager.abs()).double().mean())
    report: dict[str, Any] = {
        "samples": int(eager.shape[0]),
        "output_shape": list(eager.shape),
        "max_abs_error": float(diff.max()),
        "max_rel_error": float(diff.max()) / scale,
        "share_within_tolerance": within,
        "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "min_top1_agreement": tol.min_top1_agreement},
    }
    passed = within == 1.0
    if is_classifier(eager, target):
        agree = float((eager.argmax(-1) == got.argmax(-1)).double().mean())
        report |= {
            "accuracy_eager": accuracy(eager, target),
            "accuracy_export": accuracy(got, target),
            "top1_agreement": agree,
        }
        # Outputs within tolerance can still flip a near-tie's top-1: what a deployment would notice.
        passed = passed and agree >= tol.min_top1_agreement
    report["passed"] = passed
    return report


def write(report: dict, artifact: Path) -> Path:
    path = artifact.with_name(artifact.name + ".parity.json")
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def summary_line(report: dict) -> str:
    if "problem" in report:
        return report["problem"]
    parts = [
        f"max abs error {report['max_abs_error']:.3g}",
        f"max rel error {report['max_rel_error']:.3g}",
        f"{report['share_within_tolerance']:.2%} within atol {report['tolerance']['atol']:g} "
        f"+ rtol {report['tolerance']['rtol']:g}",
    ]
    if "top1_agreement" in report:
        parts.append(
            f"accuracy {report['accuracy_export']:.2%} ({report['runtime']}) vs "
            f"{report['accuracy_eager']:.2%} (eager), top-1 agreement {report['top1_agreement']:.2%}"
        )
    return "; ".join(parts)


def check(report: dict, artifact: Path) -> None:
    if not report["passed"]:
        raise ParityError(
            f"{artifact}: parity FAILED on {report.get('samples')} samples: {summary_line(report)}"
        )
