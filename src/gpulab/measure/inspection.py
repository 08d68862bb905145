"""What ``gpulab inspect`` gives back on every engine: a row per layer call (``LayerRow`` with its tensors'
``TensorInfo``), the layer that failed (``LayerFailure``), the trace (``Inspection``) and the report with its
totals (``InspectReport``, the ``--json`` contract). Below the engines, so each engine's inspect
(engines/<name>/inspect.py) builds the same report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpulab.engine_registry import DEFAULT
from gpulab.errors import GpulabError


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
    engine: str = DEFAULT

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
            else {**failure_json(i.failure), "message": i.failure.message()},
            "notes": self.notes,
        }


def failure_json(f: LayerFailure) -> dict[str, Any]:
    return {"name": f.name, "type": f.type, "inputs": [vars(t) for t in f.inputs], "expected": f.expected}


def first_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message (at most 200 characters)."""
    lines = str(exc).strip().splitlines()
    text = lines[0][:200] if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
