"""`gpulab doctor`: is this environment right for training, and how to fix what is not.

Two halves so that every check can be driven by crafted inputs in tests: ``facts.gather_facts()`` reads
the machine once; each function in ``checks.CHECKS`` is a pure function of those facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gpulab.hardware.checks import CHECKS, Check
from gpulab.hardware.facts import Facts, gather_facts


@dataclass
class Report:
    facts: Facts
    checks: list[Check]

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        return {
            "frameworks": {
                "python": f.python_version,
                "torch": None
                if f.torch_version is None
                else {
                    "version": f.torch_version,
                    "build": f.torch_build,
                    "cuda": f.torch_cuda,
                    "hip": f.torch_hip,
                    "nccl": f.nccl_version,
                },
                "tensorflow": _tensorflow_json(f),
                "nvidia_driver": f.driver_version,
            },
            "devices": [d.to_json() for d in f.devices],
            "checks": [asdict(c) for c in self.checks],
        }


def _tensorflow_json(f: Facts) -> dict[str, Any] | None:
    if f.tensorflow_version is None and f.tensorflow_error is None:
        return None  # not installed
    return {
        "version": f.tensorflow_version,
        "error": f.tensorflow_error,
        "cuda_build": f.tensorflow_cuda_build,
        "cuda": f.tensorflow_cuda,
        "cudnn": f.tensorflow_cudnn,
        "gpus": f.tensorflow_gpu_count,
        "xla": f.tensorflow_version is not None and f.tensorflow_xla_error is None,
    }


def run_doctor(
    facts: Facts | None = None, engine_checks: Callable[[Facts], list[Check]] = lambda facts: []
) -> Report:
    """The machine's checks, then the engines' (``engine_checks``: the CLI asks each engine's ``doctor``)."""
    facts = gather_facts() if facts is None else facts
    results = (check(facts) for check in CHECKS)
    return Report(facts, [c for c in results if c is not None] + engine_checks(facts))  # None: not shown
