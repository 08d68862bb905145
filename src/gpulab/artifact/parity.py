"""Parity: does the artifact, run in its own runtime, compute what the eager PyTorch model computes?

Reported for every export: the largest absolute difference, the same relative to the largest eager output,
the share of elements within ``atol + rtol * |eager|`` and, where the target is a class index per output
row (a classifier, or a language model's next token), the accuracy of both and the share of equal top-1
predictions. The tolerances are per precision: fp32 runtimes differ only in summation order; bf16/fp16
ones may also fuse or keep intermediates at another width.

Computed in NumPy (float64) on torch tensors or NumPy arrays alike: the TensorFlow engine's export checks
its artifacts here without torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.artifact.atomic import write_text
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


def _float64(t: Any) -> np.ndarray:
    """A torch tensor (any dtype, bf16 included) or an array as a float64 array."""
    if isinstance(t, np.ndarray):
        return t.astype(np.float64)
    return t.detach().cpu().double().numpy()


def _array(t: Any) -> np.ndarray:
    return t if isinstance(t, np.ndarray) else t.detach().cpu().numpy()


def _is_floating(t: Any) -> bool:
    return t.is_floating_point() if hasattr(t, "is_floating_point") else np.issubdtype(t.dtype, np.floating)


def is_classifier(output: Any, target: Any | None) -> bool:
    return (
        target is not None
        and not _is_floating(target)
        and len(output.shape) >= 2
        and tuple(output.shape[:-1]) == tuple(target.shape)
    )


def accuracy(output: Any, target: Any, shift: bool = False) -> float:
    """The share of right top-1 predictions (labels -100 not counted); ``shift``: a causal LM's logits at
    t against the label at t+1, as its training reads them (a sequence output only)."""
    output, target = _float64(output), _array(target)
    if shift and output.ndim >= 3:
        output, target = output[..., :-1, :], target[..., 1:]
    keep = target != -100  # the ignore index of cross-entropy, as the Trainer's accuracy
    return float((output.argmax(-1)[keep] == target[keep]).mean())


def compare(eager: Any, got: Any, target: Any | None, precision: str, *, shift: bool = False) -> dict:
    """``eager`` and ``got``: torch tensors or NumPy arrays of the same shape. ``shift``: the accuracy of
    a causal LM, whose logits at position t predict the label at t+1 (as its training loss and the
    Trainer's accuracy read them); the outputs themselves are compared whole."""
    tol = TOLERANCES[precision]
    if tuple(eager.shape) != tuple(got.shape):
        return {"passed": False, "problem": f"output shape {tuple(got.shape)} != eager {tuple(eager.shape)}"}
    classifier = is_classifier(eager, target)
    eager, got = _float64(eager), _float64(got)
    diff = np.abs(got - eager)
    scale = float(np.abs(eager).max()) or 1.0
    within = float((diff <= tol.atol + tol.rtol * np.abs(eager)).mean())
    report: dict[str, Any] = {
        "samples": int(eager.shape[0]),
        "output_shape": list(eager.shape),
        "max_abs_error": float(diff.max()),
        "max_rel_error": float(diff.max()) / scale,
        "share_within_tolerance": within,
        "tolerance": {"atol": tol.atol, "rtol": tol.rtol, "min_top1_agreement": tol.min_top1_agreement},
    }
    passed = within == 1.0
    if classifier:
        agree = float((eager.argmax(-1) == got.argmax(-1)).mean())
        report |= {
            "accuracy_eager": accuracy(eager, target, shift),
            "accuracy_export": accuracy(got, target, shift),
            "top1_agreement": agree,
        }
        if shift and eager.ndim >= 3:
            report["accuracy_shifted"] = True  # logits at t against the label at t+1
        # Outputs within tolerance can still flip a near-tie's top-1: what a deployment would notice.
        passed = passed and agree >= tol.min_top1_agreement
    report["passed"] = passed
    return report


def compare_outputs(eager: Any, got: Any, target: Any | None, precision: str, *, shift: bool = False) -> dict:
    """``compare`` for one output; for a model of several (dicts of them by output name), each output's
    report under ``outputs`` (its target the target's entry of that name), the worst figures on top and
    passed only where every output passed."""
    if not isinstance(eager, Mapping):
        return compare(eager, got, target, precision, shift=shift)
    if not isinstance(got, Mapping) or sorted(got) != sorted(eager):
        given = sorted(got) if isinstance(got, Mapping) else "one tensor"
        return {"passed": False, "problem": f"outputs {given} != eager {sorted(eager)}"}
    targets = target if isinstance(target, Mapping) else {}
    outputs = {n: compare(eager[n], got[n], targets.get(n), precision, shift=shift) for n in eager}
    problems = [f"output {n}: {r['problem']}" for n, r in outputs.items() if "problem" in r]
    if problems:
        return {"passed": False, "problem": "; ".join(problems), "outputs": outputs}
    reports = list(outputs.values())
    return {
        "samples": reports[0]["samples"],
        "max_abs_error": max(r["max_abs_error"] for r in reports),
        "max_rel_error": max(r["max_rel_error"] for r in reports),
        "share_within_tolerance": min(r["share_within_tolerance"] for r in reports),
        "tolerance": reports[0]["tolerance"],
        "outputs": outputs,
        "passed": all(r["passed"] for r in reports),
    }


def write(report: dict, artifact: Path) -> Path:
    return write_text(artifact.with_name(artifact.name + ".parity.json"), json.dumps(report, indent=2) + "\n")


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
