"""`gpulab doctor`: is this environment right for training, and how to fix what is not.

Two halves so that every check can be driven by crafted inputs in tests: ``facts.gather_facts()`` reads
the machine once; each function in ``checks.CHECKS`` is a pure function of those facts.
"""

from __future__ import annotations

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
                "tensorflow": f.tensorflow_version,
                "nvidia_driver": f.driver_version,
            },
            "devices": [d.to_json() for d in f.devices],
            "checks": [asdict(c) for c in self.checks],
        }


def run_doctor(facts: Facts | None = None) -> Report:
    facts = gather_facts() if facts is None else facts
    return Report(facts, [check(facts) for check in CHECKS])
