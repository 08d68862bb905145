"""What the NVIDIA driver says about the GPUs, through NVML (``pynvml`` from nvidia-ml-py).

Nothing here raises: on a machine without the driver, without a GPU, or without nvidia-ml-py, every
function reports "unavailable" (``False``, ``None``, ``0``, ``[]``) and ``nvml_status`` says why. NVML is
initialised once, lazily, on first use. One field a GPU does not support (power on many consumer cards,
clocks under some virtualisation) becomes ``None`` in a reading instead of spoiling the rest.

NVML numbers GPUs physically (PCI bus order, ignoring ``CUDA_VISIBLE_DEVICES``), torch numbers the ones
CUDA lets it see; ``physical_index_for`` maps one onto the other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_REASONS = {  # pynvml error class name -> why NVML is unavailable, in words a user can act on
    "NVMLError_LibraryNotFound": "NVIDIA driver library not found",
    "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded",
    "NVMLError_NoPermission": "no permission to talk to the NVIDIA driver",
    "NVMLError_LibRmVersionMismatch": "NVIDIA driver and kernel module versions differ (reboot?)",
}


@functools.cache
def _init() -> tuple[ModuleType | None, str]:
    """Import pynvml and call nvmlInit once: (the module or None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "NVML unavailable: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        why = _REASONS.get(type(exc).__name__, str(exc) or type(exc).__name__)
        return None, f"NVML unavailable: {why}"
    return pynvml, "NVML available"


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None when NVML cannot answer (unsupported field, lost GPU, old driver)."""
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    # Older pynvml releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def nvml_status() -> tuple[bool, str]:
    """(whether NVML answers, and why not or which driver)."""
    nv, reason = _init()
    if nv is None:
        return False, reason
    version = driver_version()
    return True, f"NVML available (driver {version})" if version else reason


def driver_version() -> str | None:
    """The NVIDIA driver's version, e.g. "550.54.15"."""
    nv, _ = _init()
    return None if nv is None else _text(_call(nv.nvmlSystemGetDriverVersion))


def cuda_driver_version() -> tuple[int, int] | None:
    """The newest CUDA version the driver supports, e.g. (12, 4)."""
    nv, _ = _init()
    version = None if nv is None else _call(nv.nvmlSystemGetCudaDriverVersion)
    return None if version is None else (version // 1000, version % 1000 // 10)


def physical_gpu_count() -> int:
    """GPUs the driver sees, whatever ``CUDA_VISIBLE_DEVICES`` says; 0 when NVML is unavailable."""
    nv, _ = _init()
    return (None if nv is None else _call(nv.nvmlDeviceGetCount)) or 0


def gpu_names() -> list[str]:
    """Every physical GPU's name, in NVML order ("unknown" for one that does not answer)."""
    nv, _ = _init()
    names = []
    for index in range(physical_gpu_count()):
        handle = _call(nv.nvmlDeviceGetHandleByIndex, index)
        name = None if handle is None else _text(_call(nv.nvmlDeviceGetName, handle))
        names.append(name or "unknown")
    return names


@dataclass(frozen=True)
class GpuReading:
    """One look at one physical GPU. A field NVML cannot read on this GPU is None."""

    available: bool
    reason: str  # "ok", the fields that could not be read, or why nothing could
    name: str | None = None
    uuid: str | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None


def _field_readers(nv: ModuleType) -> dict[str, Callable[[Any], Any]]:
    """GpuReading field -> how to read it from a device handle (each read on its own)."""
    return {
        "name": lambda h: _text(nv.nvmlDeviceGetName(h)),
        "uuid": lambda h: _text(nv.nvmlDeviceGetUUID(h)),
        "utilization_gpu_pct": lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu,
        "utilization_memory_pct": lambda h: nv.nvmlDeviceGetUtilizationRates(h).memory,
        "memory_used_bytes": lambda h: nv.nvmlDeviceGetMemoryInfo(h).used,
        "memory_total_bytes": lambda h: nv.nvmlDeviceGetMemoryInfo(h).total,
        "power_w": lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,  # mW
        "power_limit_w": lambda h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,  # mW
        "temperature_c": lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "sm_clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "memory_clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    }


def read_gpu(index: int) -> GpuReading:
    """Read name, utilisation, memory, power, temperature and clocks of physical GPU ``index``."""
    nv, reason = _init()
    if nv is None:
        return GpuReading(available=False, reason=reason)
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except nv.NVMLError as exc:
        return GpuReading(available=False, reason=f"NVML cannot open GPU {index}: {exc}")
    values = {field: _call(read, handle) for field, read in _field_readers(nv).items()}
    missing = [field for field, value in values.items() if value is None]
    reason = f"unreadable: {', '.join(missing)}" if missing else "ok"
    return GpuReading(available=True, reason=reason, **values)


# --------------------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES


def _valid_entry(entry: str) -> bool:
    return entry.isdigit() or entry.startswith(("GPU-", "MIG-"))


def parse_visible_devices(value: str) -> list[str]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lets CUDA see, in torch's order.

    CUDA's rules: entries are comma-separated integer indices or "GPU-"/"MIG-" UUIDs (spaces around an
    entry are ignored); the list ends at the first entry that is neither (so "-1" or "" hide every GPU
    and "0,x,1" is just "0"); a repeated entry hides every GPU. Indices come back normalised ("02" -> "2").
    """
    devices: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not _valid_entry(entry):
            break
        entry = str(int(entry)) if entry.isdigit() else entry
        if entry in devices:
            return []
        devices.append(entry)
    return devices


def _index_of_uuid(nv: ModuleType, uuid: str) -> int | None:
    """The physical index of a GPU given its UUID (or a unique prefix of it, as CUDA allows)."""
    if uuid.startswith("MIG-"):  # a MIG slice: report the GPU it lives on
        handle = _call(nv.nvmlDeviceGetHandleByUUID, uuid)
        parent = None if handle is None else _call(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
        return None if parent is None else _call(nv.nvmlDeviceGetIndex, parent)
    matches = []
    for index in range(physical_gpu_count()):
        handle = _call(nv.nvmlDeviceGetHandleByIndex, index)
        candidate = None if handle is None else _text(_call(nv.nvmlDeviceGetUUID, handle))
        if candidate and candidate.startswith(uuid):
            matches.append(index)
    return matches[0] if len(matches) == 1 else None


def physical_index_for(torch_index: int, cuda_visible_devices: str | None) -> int | None:
    """The NVML (physical) index of torch's ``cuda:torch_index``, or None when it cannot be told.

    ``cuda_visible_devices`` is the environment variable's value (None when unset: torch's order is then
    taken to be NVML's, which holds unless ``CUDA_DEVICE_ORDER`` is left at FASTEST_FIRST on a machine
    with mixed GPUs). UUID entries need NVML to resolve; without it they give None.
    """
    nv, _ = _init()
    count = physical_gpu_count() if nv is not None else None
    if torch_index < 0:
        return None
    if cuda_visible_devices is None:
        return torch_index if count is None or torch_index < count else None
    entries = parse_visible_devices(cuda_visible_devices)
    if torch_index >= len(entries):
        return None
    index: int | None = None
    for entry in entries[: torch_index + 1]:
        if entry.isdigit():
            index = int(entry)
            exists = count is None or index < count
        else:
            index = None if nv is None else _index_of_uuid(nv, entry)
            exists = nv is None or index is not None
        if not exists:  # CUDA ends the list at a device that does not exist
            return None
    return index
