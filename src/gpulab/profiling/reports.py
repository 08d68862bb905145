"""The report types of ``gpulab profile`` and ``gpulab inspect``, shared by both engines: no torch here, so
a TensorFlow profile or inspect builds them without it (``profiler.py``, ``inspect_model.py`` and
``inspect_run.py`` are torch's side and import these)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError


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


@dataclass
class TensorInfo:
    shape: list[int]
    dtype: str  # short name: f32, bf16, i64, ...

    def __str__(self) -> str:
        return f"{'×'.join(map(str, self.shape)) or 'scalar'} {self.dtype}"


@dataclass
class LayerRow:
    """One call of one module during the forward pass."""

    name: str  # dotted path from the root ("" for the root)
    depth: int  # call nesting, 0 for the root
    type: str
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    params_trainable: int = 0
    params_frozen: int = 0
    flops_forward: int = 0  # this call's forward FLOPs, its children's included
    activation_bytes: int = 0  # bytes allocated during the call and still alive when it returned
    cast_dtype: str | None = None  # a leaf computing in another dtype than the run's (autocast's lists)
    leaf: bool = True
    status: str = "ok"  # ok | failed | unfinished (an ancestor of the failing module)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LayerFailure:
    """The module that raised on its input, with what it received and what it expects."""

    name: str
    type: str
    inputs: list[TensorInfo]
    expected: str | None
    error: str  # the first line of the exception

    def message(self) -> str:
        got = ", ".join(str(t) for t in self.inputs) or "no tensor"
        want = f"; expected {self.expected}" if self.expected else ""
        where = f"layer {self.name!r} ({self.type})" if self.name else f"the model ({self.type})"
        return f"{where} failed on its input {got}{want} ({self.error})"


@dataclass
class Inspection:
    rows: list[LayerRow]
    flops_total: int  # one forward + backward over the batch (the FLOP counter's figure)
    flops_forward: int
    batch_size: int
    run_dtype: str
    method: str  # "fake tensors" or "real step"
    failure: LayerFailure | None = None

    @property
    def flops_per_sample(self) -> float:
        return self.flops_total / self.batch_size if self.batch_size else 0.0


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0][:200] if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class InspectFailed(GpulabError):
    """A layer failed on its input during the trace: the partial table is shown, then this line."""


@dataclass
class InspectReport:
    recipe: str
    device: str
    precision: str
    optimizer: str | None
    inspection: Inspection
    params_trainable: int
    params_frozen: int
    params_bytes: int
    memory: Any = None  # MemoryEstimate, None when it could not be made (then memory_note says why)
    memory_note: str | None = None
    limit_bytes: int | None = None
    limit_source: str = ""
    notes: list[str] = field(default_factory=list)
    engine: str = "torch"

    @property
    def fits(self) -> bool | None:
        if self.memory is None or self.limit_bytes is None:
            return None
        return self.memory.predicted_peak_bytes <= self.limit_bytes

    def to_json(self, depth: int | None = None) -> dict[str, Any]:
        i = self.inspection
        rows = [r.to_json() for r in i.rows if depth is None or r.depth <= depth or r.status == "failed"]
        return {
            "recipe": self.recipe,
            "engine": self.engine,
            "device": self.device,
            "precision": self.precision,
            "run_dtype": i.run_dtype,
            "batch_size": i.batch_size,
            "method": i.method,
            "rows": rows,
            "totals": {
                "params_trainable": self.params_trainable,
                "params_frozen": self.params_frozen,
                "params_bytes": self.params_bytes,
                "flops_per_step": i.flops_total if i.failure is None else None,
                "flops_forward_per_step": i.flops_forward if i.failure is None else None,
                "flops_per_sample": i.flops_per_sample if i.failure is None and i.flops_total else None,
                "predicted_peak_bytes": self.memory.predicted_peak_bytes if self.memory else None,
                "memory": self.memory.to_json() if self.memory else None,
                "memory_note": self.memory_note,
                "limit_bytes": self.limit_bytes,
                "limit_source": self.limit_source,
                "fits": self.fits,
            },
            "failure": None
            if i.failure is None
            else {**_failure_json(i.failure), "message": i.failure.message()},
            "notes": self.notes,
        }


def _failure_json(f) -> dict[str, Any]:
    return {"name": f.name, "type": f.type, "inputs": [vars(t) for t in f.inputs], "expected": f.expected}


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)
