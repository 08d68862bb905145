"""What ``gpulab profile`` gives back on every engine: the options it runs with, the result (the report
``profile.json`` holds and the files written), and the writer of that file. Below the engines, so each
engine's profile (engines/<name>/profile.py) builds the same result."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILE_FILE = "profile.json"


@dataclass
class ProfileOptions:
    warmup: int = 3  # untimed steps first
    steps: int = 10  # timed steps (the breakdown)
    active: int = 3  # steps recorded by torch.profiler (after one profiler warm-up step)
    measure_peak: bool = True  # measure this device's matmul peak for MFU (cached)
    memory_snapshot: bool = False  # CUDA: record allocations during the profiled steps
    record_shapes: bool = False
    with_stack: bool = False
    nvml_interval_s: float = 0.05


@dataclass
class ProfileResult:
    report: dict[str, Any]
    out_dir: Path
    files: dict[str, str] = field(default_factory=dict)

    @property
    def breakdown(self) -> dict[str, float]:
        return self.report["breakdown_s"]

    @property
    def diagnosis(self) -> dict[str, Any]:
        return self.report["diagnosis"]


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """``obj`` as indented JSON at ``path``, replaced whole (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)
