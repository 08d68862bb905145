"""Which low-precision dtypes a device computes natively, i.e. fast.

bf16 or fp16 on a device without native support is emulated: a CPU without AVX-512 BF16 ran the digits
recipe 60-70x slower in bf16-mixed than in fp32. So support alone ("torch can run it") is not the
question; speed is. What is known to be fast:

- CUDA: bf16 from compute capability 8.0 (Ampere), fp16 on tensor cores from 7.0 (Volta). Older parts
  run fp16 at a fraction of fp32 (1/64 on consumer Pascal) and bf16 emulated.
- x86 CPU: bf16 with the ``avx512_bf16`` or ``amx_bf16`` flags, fp16 with ``amx_fp16``.
- Arm CPU: bf16 with the ``bf16`` feature (Neoverse V1/N2, Graviton3), fp16 with ``asimdhp``.
- Anything else (MPS, XPU, ...): unknown (None): no advice and no warning either way.

torch is imported inside the functions: ``gpulab doctor`` imports ``hardware`` where torch is missing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

LOW_DTYPES = ("bf16", "fp16")

# /proc/cpuinfo flags (x86 "flags", Arm "Features") that make each dtype fast.
_CPU_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16", "bf16"), "fp16": ("amx_fp16", "asimdhp")}
# Lowest CUDA compute capability that computes each dtype natively.
_CUDA_CAPABILITY = {"bf16": (8, 0), "fp16": (7, 0)}


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (or ``cpuinfo`` text); None where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def native_on_cpu(dtype: str, flags: set[str] | None) -> bool | None:
    """Whether a CPU with ``flags`` computes ``dtype`` natively; None when the flags are unknown."""
    if flags is None:
        return None
    return any(flag in flags for flag in _CPU_FLAGS[dtype])


def native_on_cuda(dtype: str, capability: tuple[int, int]) -> bool:
    return tuple(capability) >= _CUDA_CAPABILITY[dtype]


def native_dtypes(device) -> dict[str, bool | None]:
    """``{"bf16": ..., "fp16": ...}`` for ``device`` (a torch.device or a string): True where the device
    computes the dtype natively, False where it is emulated (slow), None where unknown. torch is imported
    for a CUDA device only (the TensorFlow engine's tune asks about the CPU without it)."""
    kind = str(device).partition(":")[0]
    if kind == "cuda":
        import torch

        capability = None
        with contextlib.suppress(Exception):  # no driver: unknown, never a crash
            capability = torch.cuda.get_device_capability(torch.device(str(device)))
        return {d: None if capability is None else native_on_cuda(d, capability) for d in LOW_DTYPES}
    if kind == "cpu":
        flags = cpu_flags()
        return {d: native_on_cpu(d, flags) for d in LOW_DTYPES}
    return dict.fromkeys(LOW_DTYPES)


def slow_dtype_note(dtype: str, device) -> str:
    """Why ``dtype`` is slow on ``device``, for a warning or a diagnosis (one clause)."""
    if str(device).partition(":")[0] == "cuda":
        need = ".".join(map(str, _CUDA_CAPABILITY[dtype]))
        return f"{device} computes {dtype} natively only from compute capability {need}"
    return f"this CPU has no native {dtype} ({' / '.join(_CPU_FLAGS[dtype])}): it is emulated"
