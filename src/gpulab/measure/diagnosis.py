"""What bounds a run, and the concrete fix: a pure function of measured numbers.

The rules, first match wins (thresholds are module constants, documented in docs/PERF.md's spirit:
rough but stated):

0. a precision the device only emulates (bf16 or fp16 without native support: many times slower than
   fp32) is named first, with fp32 as the fix. No fix ever advises a precision the device runs slowly.
1. input-bound: waiting for data takes more than 10 % of the step.
2. communication-bound: collectives take more than 25 % of the step (several processes only).
3. host/launch-bound: on a GPU, utilisation under 70 % although data arrives in time -- the GPU idles
   between kernels the host launches too slowly; or a step on a single sample takes more than half as
   long as the real step (the fixed cost per step -- Python, dispatch, launches -- dominates the work);
   or, without either reading, more than 25 % of the step outside every timed phase. Never where MFU
   reaches 30 % of the measured peak: a GPU doing that much arithmetic is not waiting on the host.
4. memory-bound: the peak holds more than 90 % of the memory (capacity), or the device is busy but at
   under 20 % of its measured matmul peak (bandwidth: element-wise work moving bytes, not multiplying).
5. compute-bound: otherwise.

Each fix is in the words of the engine that ran (its ``diagnosis`` capability, ``diagnosis_advice.Advice``:
torch's DataLoader workers and torch.compile, TensorFlow's tf.data cache and XLA), and names only settings
that engine accepts: they are in ``Diagnosis.settings``, which tests/measure/test_diagnosis_settings.py
walks through each engine's settings validation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpulab.measure.diagnosis_advice import Advice, advice_for
from gpulab.precisions import PRECISIONS

INPUT_FRACTION = 0.10
COMMUNICATION_FRACTION = 0.25
LOW_UTILIZATION_PCT = 70.0
IDLE_FRACTION = 0.25
FIXED_COST_FRACTION = 0.5
MEMORY_FULL_FRACTION = 0.90
LOW_MFU = 0.20
BUSY_MFU = 0.30  # at or above it a run is not host-bound, whatever a utilisation mean says

BOUNDS = ("input-bound", "communication-bound", "host-bound", "memory-bound", "compute-bound")


@dataclass(frozen=True)
class Diagnosis:
    bound: str  # one of BOUNDS
    reason: str  # the numbers that decided it
    fix: str  # what to change, concretely
    fractions: dict[str, float] = field(default_factory=dict)  # share of the step per phase
    settings: dict[str, Any] = field(
        default_factory=dict
    )  # the settings the fix names, as the engine takes them

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(
    breakdown: dict[str, float],
    *,
    device_type: str,
    gpu_utilization_pct: float | None = None,
    memory_peak_fraction: float | None = None,
    mfu: float | None = None,
    fixed_cost_fraction: float | None = None,
    precision: str = "fp32",
    compiled: bool = False,
    native: dict[str, bool | None] | None = None,
    engine: str | None = None,
) -> Diagnosis:
    """Name the bound of a run from its step ``breakdown`` (seconds per phase and ``step``), the GPU's
    mean utilisation (None on a CPU or without NVML), the peak memory over the capacity or limit, MFU
    against the measured peak, and the time of a one-sample step over the real step's (each None if
    unknown). ``native``: ``hardware.native_dtypes.native_dtypes`` of the device (None: a GPU is assumed
    to have fast bf16 and fp16, a CPU neither). ``engine``: whose words and settings the fix uses (torch
    unless named)."""
    step = breakdown.get("step") or 0.0
    fractions = {k: v / step for k, v in breakdown.items() if k != "step"} if step > 0 else {}
    on_gpu = device_type == "cuda"
    fast = _fast_low_precision(native, on_gpu)
    words = advice_for(engine)

    def verdict(bound: str, reason: str, fix: tuple[str, dict[str, Any]]) -> Diagnosis:
        return Diagnosis(bound, reason, fix[0], fractions, fix[1])

    spec = PRECISIONS.get(precision)
    dtype = spec.peak_dtype if spec is not None and spec.mixed else None
    if dtype is not None and native is not None and native.get(dtype) is False:
        return verdict(
            "compute-bound",
            f"{precision} on a device without native {dtype}: every {dtype} operation is emulated",
            (
                f"--precision fp32 (often many times faster here){'; or ' + fast if fast else ''}",
                {"precision": "fp32"},
            ),
        )

    data = fractions.get("data", 0.0)
    if data > INPUT_FRACTION:
        return verdict("input-bound", f"waiting for data takes {data:.0%} of the step", words.input(on_gpu))
    comm = fractions.get("communication", 0.0)
    if comm > COMMUNICATION_FRACTION:
        return verdict(
            "communication-bound",
            f"collectives take {comm:.0%} of the step",
            words.communication,
        )
    host = _host_bound(fractions, gpu_utilization_pct, fixed_cost_fraction, on_gpu)
    if host is not None and not (mfu is not None and mfu >= BUSY_MFU):
        return verdict("host-bound", host, _host_fix(words, on_gpu, compiled))
    if memory_peak_fraction is not None and memory_peak_fraction > MEMORY_FULL_FRACTION:
        return verdict(
            "memory-bound",
            f"the peak holds {memory_peak_fraction:.0%} of the memory",
            _capacity_fix(words, fast if fast and _full_width(precision) else None),
        )
    if (
        mfu is not None
        and mfu < LOW_MFU
        and (gpu_utilization_pct is None or not on_gpu or gpu_utilization_pct >= 70)
    ):
        busy = f", GPU {gpu_utilization_pct:.0f}% busy" if gpu_utilization_pct is not None else ""
        return verdict(
            "memory-bound",
            f"MFU {mfu:.0%} of the measured peak{busy}: time goes to moving bytes, not multiplying",
            _bandwidth_fix(words, precision, compiled, fast),
        )
    mfu_text = f" at {mfu:.0%} of the measured peak" if mfu is not None else ""
    reason = f"the device computes most of the step{mfu_text}"
    return verdict("compute-bound", reason, _compute_fix(words, precision, on_gpu, fast))


def _host_bound(
    fractions: dict[str, float], util: float | None, fixed: float | None, on_gpu: bool
) -> str | None:
    if on_gpu and util is not None and util < LOW_UTILIZATION_PCT:
        return f"GPU busy only {util:.0f}% of the time while data arrives in time"
    if fixed is not None and fixed > FIXED_COST_FRACTION:
        return f"a step on one sample takes {fixed:.0%} of the real step: per-step overhead dominates"
    idle = fractions.get("idle")
    if util is None and fixed is None and idle is not None and idle > IDLE_FRACTION:
        return f"{idle:.0%} of the step is spent outside forward, backward and the optimizer"
    return None


def _host_fix(words: Advice, on_gpu: bool, compiled: bool) -> tuple[str, dict[str, Any]]:
    hint, settings = words.fewer_launches(compiled)
    if on_gpu:
        syncs = f"no host syncs ({words.host_sync}) inside the step"
        return f"launch less per sample: a larger batch, {hint}, and {syncs}", settings
    if compiled:  # the step is compiled already: only more work per step is left
        return "less Python per sample: a larger batch (the step is compiled already)", {}
    text = f"less Python per sample: a larger batch, or {words.compile} to fuse small operations"
    return text, {"compile": True}


def _capacity_fix(words: Advice, fast: str | None) -> tuple[str, dict[str, Any]]:
    text, settings = words.capacity
    if fast:
        return f"free memory: {fast} (half the activations), {text}", {**settings, "precision": fast}
    return f"free memory: {text}", settings


def _full_width(precision: str) -> bool:
    """Computes in float32 (fp32, tf32): a mixed precision would halve its bytes."""
    spec = PRECISIONS.get(precision)
    return spec is not None and not spec.mixed


def _fast_low_precision(native: dict[str, bool | None] | None, on_gpu: bool) -> str | None:
    """The mixed precision worth advising on this device, or None: never one it only emulates."""
    if native is None:  # unknown: a GPU is assumed to be a recent one, a CPU to have neither
        return "bf16-mixed" if on_gpu else None
    if native.get("bf16"):
        return "bf16-mixed"
    return "fp16-mixed" if on_gpu and native.get("fp16") else None


def _bandwidth_fix(words: Advice, precision: str, compiled: bool, fast: str | None) -> tuple[str, dict]:
    parts, settings = [], {}
    if _full_width(precision) and fast:
        parts.append(f"{fast} (half the bytes per element)")
        settings["precision"] = fast
    if not compiled:
        parts.append(f"{words.compile} to fuse element-wise operations")
        settings["compile"] = True
    parts.append("a larger batch or wider layers (more FLOPs per byte)")
    return "raise arithmetic intensity: " + ", ".join(parts), settings


def _compute_fix(words: Advice, precision: str, on_gpu: bool, fast: str | None) -> tuple[str, dict]:
    if on_gpu and precision == "fp32" and fast:
        tf32 = " (or tf32)" if fast == "bf16-mixed" else ""
        return f"use the tensor cores: {fast}{tf32}, several times the fp32 peak", {"precision": fast}
    if on_gpu:
        text, settings = words.scale_out
        return f"already compute-bound: {text}, or cut FLOPs (fused attention, a smaller model)", settings
    if precision == "fp32" and fast:
        # Native is not always faster on a CPU (digits: bf16-mixed 0.84-1.04x here): say so, and how to know.
        return (
            f"the CPU's arithmetic is the limit: train on a GPU, or try {fast} (native on this CPU; "
            "gpulab tune measures whether it pays)",
            {"precision": fast},
        )
    return "the CPU's arithmetic is the limit: train on a GPU, or cut FLOPs (a smaller model)", {}


def diagnose_run(
    *,
    train_seconds: float,
    data_wait_seconds: float,
    device_type: str,
    gpu_utilization_pct: float | None = None,
    memory_peak_fraction: float | None = None,
    mfu: float | None = None,
    precision: str = "fp32",
    compiled: bool = False,
    native: dict[str, bool | None] | None = None,
    engine: str | None = None,
) -> Diagnosis:
    """``diagnose`` for a whole training run, from the Trainer's totals (no per-phase timing)."""
    return diagnose(
        {"data": data_wait_seconds, "step": train_seconds},
        device_type=device_type,
        gpu_utilization_pct=gpu_utilization_pct,
        memory_peak_fraction=memory_peak_fraction,
        mfu=mfu,
        precision=precision,
        compiled=compiled,
        native=native,
        engine=engine,
    )


def diagnose_fit(
    result: Any, device_type: str, native: dict[str, bool | None] | None = None, engine: str | None = None
) -> Diagnosis:
    """``diagnose_run`` from a trainer's ``FitResult`` (any engine; ``engine``: its name): its totals and
    the callbacks' reports in ``extras`` (absent ones are None)."""
    extras = result.extras
    return diagnose_run(
        # the steps' own time: checkpoints, validation and recompiles are not (torch's ``untimed_s``)
        train_seconds=result.train_seconds - (extras.get("untimed_s") or 0.0),
        data_wait_seconds=extras["data_wait_s"],
        device_type=device_type,
        gpu_utilization_pct=_utilization(extras.get("nvml") or {}),
        memory_peak_fraction=extras["memory"].get("peak_fraction"),
        mfu=(extras.get("mfu") or {}).get("mfu_measured"),
        precision=result.precision,
        compiled=result.compiled,
        native=native,
        engine=engine or extras.get("engine"),  # its words: a NumPy-engine run is not told of torch's workers
    )


def _utilization(nvml: dict[str, Any]) -> float | None:
    """The steady steps' utilisation where the sampler has it (not compilation, warm-up or validation),
    else the whole fit's mean."""
    steady = nvml.get("steady_utilization_gpu_pct")
    return steady if steady is not None else (nvml.get("mean") or {}).get("utilization_gpu_pct")
