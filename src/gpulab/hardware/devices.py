"""What compute devices this machine has, as the installed framework sees them.

Discovery never raises: a missing torch or driver shows up as fewer devices, and `gpulab doctor` says
why. torch is imported lazily so the doctor can still report when it is not installed.
CUDA_VISIBLE_DEVICES is respected because torch itself only enumerates the visible GPUs.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from gpulab.errors import DeviceError, choices


@dataclass(frozen=True)
class DeviceInfo:
    """One device. ``index`` is None for the CPU; CUDA-only fields are None elsewhere."""

    type: str  # cpu | cuda | mps | xpu
    index: int | None
    name: str
    memory_total_bytes: int | None
    compute_capability: str | None = None
    sm_count: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """The string torch.device() accepts: ``cpu``, ``cuda:1``, ``mps``."""
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.type != "cuda":
            out.pop("compute_capability")
            out.pop("sm_count")
        return out


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo on Linux), or what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_device() -> DeviceInfo:
    return DeviceInfo(
        type="cpu",
        index=None,
        name=cpu_model(),
        memory_total_bytes=psutil.virtual_memory().total,
        details={
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        },
    )


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def cuda_devices() -> list[DeviceInfo]:
    """CUDA (or ROCm, which torch also exposes as ``cuda``) GPUs visible to this process."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return []
    from gpulab.hardware import nvml

    common = {
        "driver": nvml.driver_version(),
        "cuda_runtime": torch.version.cuda,
        "hip_runtime": getattr(torch.version, "hip", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": nccl_version(),
    }
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            DeviceInfo(
                type="cuda",
                index=i,
                name=p.name,
                memory_total_bytes=int(p.total_memory),
                compute_capability=f"{p.major}.{p.minor}",
                sm_count=int(p.multi_processor_count),
                details=dict(common),
            )
        )
    return out


def nccl_version() -> str | None:
    torch = _torch()
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # torch without NCCL raises various errors depending on the build
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def mps_devices() -> list[DeviceInfo]:
    torch = _torch()
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    if mps is None or not mps.is_available():
        return []
    return [
        DeviceInfo(type="mps", index=None, name="Apple MPS", memory_total_bytes=psutil.virtual_memory().total)
    ]


def xpu_devices() -> list[DeviceInfo]:
    torch = _torch()
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return []
    out = []
    for i in range(xpu.device_count()):
        p = xpu.get_device_properties(i)
        out.append(DeviceInfo(type="xpu", index=i, name=p.name, memory_total_bytes=int(p.total_memory)))
    return out


# Order matters: it is the preference order of select_device("auto").
_ACCELERATORS = {"cuda": cuda_devices, "mps": mps_devices, "xpu": xpu_devices}


def discover() -> list[DeviceInfo]:
    """Every device: the CPU first, then each visible accelerator."""
    out = [cpu_device()]
    for finder in _ACCELERATORS.values():
        out.extend(finder())
    return out


def torch_build() -> str:
    """``cpu``, ``cuda``, ``rocm`` or ``none``: what the installed torch was compiled for."""
    torch = _torch()
    if torch is None:
        return "none"
    if getattr(torch.version, "hip", None):
        return "rocm"
    return "cuda" if torch.version.cuda else "cpu"


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # what torch.device() accepts
    reason: str


def select_device(spec: str = "auto", devices: list[DeviceInfo] | None = None) -> DeviceChoice:
    """Resolve ``auto|cpu|cuda|cuda:N|mps|xpu|xpu:N`` against what is really here.

    ``auto`` prefers cuda > mps > xpu > cpu. Asking for a device that is not here raises a DeviceError
    naming what is available.
    """
    devices = discover() if devices is None else devices
    by_type: dict[str, list[DeviceInfo]] = {}
    for d in devices:
        by_type.setdefault(d.type, []).append(d)
    here = [d.spec for d in devices]

    if spec == "auto":
        for kind in _ACCELERATORS:
            if kind in by_type:
                first = by_type[kind][0]
                return DeviceChoice(first.spec, f"auto: {first.name} is the first visible {kind} device")
        return DeviceChoice("cpu", f"auto: no GPU visible to torch (build: {torch_build()}), using the CPU")

    kind, _, index = spec.partition(":")
    if kind == "cpu" and not index:
        return DeviceChoice("cpu", "requested")
    found = by_type.get(kind, [])
    if not found:
        raise DeviceError(
            f"device {spec!r} requested but this machine has no {kind} device visible to torch "
            f"(torch build: {torch_build()}); available here: {choices(here)} (run `gpulab doctor` for why)"
        )
    if not index:
        return DeviceChoice(found[0].spec, "requested")
    if int(index) >= len(found) or found[0].index is None:
        raise DeviceError(f"device {spec!r} does not exist; available here: {choices(here)}")
    return DeviceChoice(spec, "requested")
