"""Peak FLOP/s of a device: from the datasheet, and measured with a timed matrix product.

MFU (model FLOPs utilisation) divides what a run achieved by one of these peaks. The datasheet figure
is the honest denominator for comparing runs across machines; the measured figure says what this exact
machine, driver and PyTorch build can reach, so it is the fairer one when judging a single run.

torch is imported inside the functions that need it: ``gpulab doctor`` imports this module on machines
where torch is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpulab.errors import ConfigError, DeviceError, choices

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")

_T = 1e12  # one TFLOP/s


def _peaks(fp32: float, tf32=None, bf16=None, fp16=None, fp8=None) -> dict[str, float]:
    """Datasheet TFLOP/s -> FLOP/s, leaving out the dtypes the part has no tensor-core path for."""
    given = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8}
    return {dtype: tflops * _T for dtype, tflops in given.items() if tflops is not None}


# Dense peak FLOP/s (no structured sparsity) per part and dtype. NVIDIA's data-center datasheets quote
# tensor-core figures "with sparsity"; those are halved here. "fp32" is the non-tensor-core CUDA-core
# figure. For GeForce cards the tensor figures are the ones with fp32 accumulation, which is what PyTorch
# uses (the headline fp16 number assumes fp16 accumulation, which GeForce parts run twice as fast).
DATASHEET_PEAKS: dict[str, dict[str, float]] = {
    # Volta and Turing have fp16 tensor cores only: no tf32, bf16 or fp8.
    "V100 SXM2": _peaks(15.7, fp16=125),
    "V100 PCIe": _peaks(14, fp16=112),
    "T4": _peaks(8.1, fp16=65),
    # Ampere.
    "A100 SXM": _peaks(19.5, tf32=156, bf16=312, fp16=312),
    "A100 PCIe": _peaks(19.5, tf32=156, bf16=312, fp16=312),
    "A10": _peaks(31.2, tf32=62.5, bf16=125, fp16=125),
    # A10G (AWS g5 only): NVIDIA publishes no datasheet. The tensor figures come from third-party listings
    # and put it near the RTX 3090 (same GA102, lower tensor throughput than the A10); the fp32 figure is
    # the A10's. Treat all of them as approximate.
    "A10G": _peaks(31.2, tf32=35, bf16=70, fp16=70),
    "RTX 3090": _peaks(35.6, tf32=35.6, bf16=71, fp16=71),
    # Ada Lovelace.
    "L4": _peaks(30.3, tf32=60, bf16=121, fp16=121, fp8=242.5),
    "L40S": _peaks(91.6, tf32=183, bf16=362, fp16=362, fp8=733),
    "RTX 4090": _peaks(82.6, tf32=82.6, bf16=165.2, fp16=165.2, fp8=330.3),
    # Hopper. H200 and GH200 have the H100 SXM's compute (more and faster memory); H200 NVL the H100 NVL's.
    "H100 SXM": _peaks(67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
    "H100 PCIe": _peaks(51.2, tf32=378, bf16=756, fp16=756, fp8=1513),
    "H100 NVL": _peaks(60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
    "H200": _peaks(67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
    "H200 NVL": _peaks(60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5),
    "GH200": _peaks(67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9),
}

# Device names as torch / NVML report them -> part. The first rule that matches wins, so the more specific
# rules come first. ``\b`` keeps "A10" off "A100" and "A10G", "L4" off "L40S", "T4" off "T400", and "H200"
# off "GH200"; GeForce variants with other figures (Ti, D, laptop parts) match no rule.
_NAME_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (part, re.compile(pattern, re.IGNORECASE))
    for part, pattern in (
        ("GH200", r"\bGH200\b"),
        ("H200 NVL", r"\bH200\b.*\bNVL\b"),
        ("H200", r"\bH200\b"),
        ("H100 NVL", r"\bH100\b.*\bNVL\b"),
        ("H100 PCIe", r"\bH100\b.*\bPCIe\b"),
        ("H100 SXM", r"\bH100\b"),  # "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"
        ("A100 PCIe", r"\bA100\b.*\bPCIe\b"),  # "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB"
        ("A100 SXM", r"\bA100\b"),  # "NVIDIA A100-SXM4-80GB"
        ("A10G", r"\bA10G\b"),
        ("A10", r"\bA10\b"),
        ("L40S", r"\bL40S\b"),
        ("L4", r"\bL4\b"),
        ("V100 PCIe", r"\bV100\b.*\bPCIe\b"),  # "Tesla V100-PCIE-16GB"; V100S is another part
        ("V100 SXM2", r"\bV100\b"),  # "Tesla V100-SXM2-32GB"
        ("T4", r"\bT4\b"),
        ("RTX 3090", r"\bRTX\s*3090\b(?!\s*(?:Ti|Laptop|Mobile)\b)"),
        ("RTX 4090", r"\bRTX\s*4090\b(?!\s*(?:Ti|D|Laptop|Mobile)\b)"),
    )
)


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}: choose one of {choices(DTYPES)}")


def match_part(device_name: str) -> str | None:
    """The datasheet part (a key of ``DATASHEET_PEAKS``) a reported device name is, or None if unknown."""
    for part, pattern in _NAME_RULES:
        if pattern.search(device_name):
            return part
    return None


def datasheet_peak(device_name: str, dtype: str) -> float | None:
    """Dense datasheet peak FLOP/s of ``device_name`` in ``dtype``; None for an unknown part or a dtype
    the part has no fast path for (e.g. bf16 on a V100)."""
    _check_dtype(dtype)
    part = match_part(device_name)
    return None if part is None else DATASHEET_PEAKS[part].get(dtype)


def mfu(achieved_flops_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: the fraction of ``peak_flops_per_s`` a run achieved."""
    if peak_flops_per_s <= 0:
        raise ConfigError(f"peak FLOP/s must be positive, got {peak_flops_per_s}")
    return achieved_flops_per_s / peak_flops_per_s


# --------------------------------------------------------------------------------------------------------
# Measured peak


@dataclass(frozen=True)
class PeakMeasurement:
    """One measured peak, with the environment it came from."""

    device: str  # as asked for: "cpu", "cuda", "cuda:1"
    device_name: str  # CPU model or GPU name: part of the cache key
    dtype: str
    flops_per_s: float
    n: int  # matrix side
    repeats: int
    seconds_median: float  # one n x n @ n x n product
    torch_version: str
    measured_at: str  # ISO 8601, UTC
    cached: bool = False  # True when read back from the cache instead of measured now


# Matrix side by default: saturates a big GPU; about a second on a slow CPU. fp16 matmul on most CPUs has
# no fast kernel (about 1 GFLOP/s on 2 EPYC cores, ~40 s at n=1024), so it gets a smaller product there.
_DEFAULT_N = {"cpu": 1024, "cuda": 8192}
_DEFAULT_N_CPU_FP16 = 512


def _default_n(device_type: str, dtype: str) -> int:
    return _DEFAULT_N_CPU_FP16 if (device_type, dtype) == ("cpu", "fp16") else _DEFAULT_N[device_type]


def cache_dir() -> Path:
    """``$GPULAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpulab``, else ``~/.cache/gpulab``."""
    if os.environ.get("GPULAB_CACHE_DIR"):
        return Path(os.environ["GPULAB_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "gpulab"
    return Path.home() / ".cache" / "gpulab"


def cache_path() -> Path:
    """The JSON file measured peaks are cached in."""
    return cache_dir() / "peaks.json"


def cpu_name() -> str:
    """The CPU model string: /proc/cpuinfo's "model name", else what ``platform`` knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "cpu"


def measure_peak(
    device: str = "cpu",
    dtype: str = "fp32",
    *,
    n: int | None = None,
    repeats: int = 10,
    warmup: int = 3,
    use_cache: bool = True,
) -> PeakMeasurement:
    """Time an ``n x n @ n x n`` product in ``dtype`` on ``device`` and return the achieved FLOP/s.

    Warm-up first, the device synchronised around every timed product, the median of ``repeats``;
    FLOP/s = 2n³ / median. With ``use_cache`` a result already measured for the same device name, dtype,
    n, thread count (CPU) and torch version is returned (``cached=True``); without it the product is timed
    afresh, and either way a fresh result replaces the cached one. ``doctor --peak``, ``train`` and
    ``profile`` all call this with the defaults, so one device and dtype has one figure everywhere.
    """
    import torch

    _check_dtype(dtype)
    if dtype == "fp8":
        raise ConfigError(
            "fp8 peak cannot be measured with a plain matmul (it needs scaled fp8 kernels): "
            "use datasheet_peak(name, 'fp8') or one of fp32|tf32|bf16|fp16"
        )
    dev = _torch_device(device)
    n = _default_n(dev.type, dtype) if n is None else n
    if n < 1 or repeats < 1 or warmup < 0:
        raise ConfigError(f"need n >= 1, repeats >= 1, warmup >= 0; got n={n}, {repeats=}, {warmup=}")

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    key = _cache_key(dev, name, dtype, n)
    cache = _read_cache()
    if use_cache and (hit := _from_entry(cache.get(key))) is not None:
        return replace(hit, device=device)  # the entry may come from another GPU of the same model

    seconds = _time_matmul(dev, dtype, n, repeats, warmup)
    result = PeakMeasurement(
        device=device,
        device_name=name,
        dtype=dtype,
        flops_per_s=2 * n**3 / seconds,
        n=n,
        repeats=repeats,
        seconds_median=seconds,
        torch_version=torch.__version__,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    _store(cache, key, result)
    return result


def raise_beaten_peak(peak: PeakMeasurement, achieved_flops_per_s: float) -> tuple[PeakMeasurement, str]:
    """A run reached ``achieved_flops_per_s``, above the (cached) ``peak``: re-measure, and if the run still
    beats the product, take the run's figure as the peak (a matmul is only a lower bound of what the device
    can do). The cache keeps the result; the note says what happened, for the user and the summary."""
    fresh = measure_peak(peak.device, peak.dtype, n=peak.n, repeats=peak.repeats, use_cache=False)
    note = (
        f"this run reached {achieved_flops_per_s / 1e12:.4g} TFLOP/s, above the cached {peak.dtype} peak "
        f"of {peak.flops_per_s / 1e12:.4g}: re-measured {fresh.flops_per_s / 1e12:.4g}"
    )
    if fresh.flops_per_s >= achieved_flops_per_s:
        return fresh, note
    raised = replace(fresh, flops_per_s=achieved_flops_per_s)
    key = _cache_key(_torch_device(peak.device), peak.device_name, peak.dtype, peak.n)
    _store(_read_cache(), key, raised)
    return raised, note + "; the run's figure is the peak now (cached)"


def _cache_key(dev, name: str, dtype: str, n: int) -> str:
    import torch

    # A CPU's peak scales with the threads torch uses: a run with OMP_NUM_THREADS=1 is another entry.
    threads = f"|threads={torch.get_num_threads()}" if dev.type == "cpu" else ""
    return f"{name}|{dtype}|n={n}{threads}|torch={torch.__version__}"


def _store(cache: dict[str, Any], key: str, result: PeakMeasurement) -> None:
    entry = asdict(result)
    del entry["cached"]
    cache[key] = entry
    _write_cache(cache)


def _torch_device(device: str):
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"unknown device {device!r}: choose one of cpu|cuda|cuda:N") from exc
    if dev.type not in _DEFAULT_N:
        raise ConfigError(f"cannot measure a peak on {device!r}: choose one of cpu|cuda|cuda:N")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DeviceError(f"device {device!r} asked for but no CUDA GPU is visible: use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= count:
            raise DeviceError(f"device {device!r} asked for but only cuda:0..cuda:{count - 1} exist")
    return dev


def _time_matmul(dev, dtype: str, n: int, repeats: int, warmup: int) -> float:
    """Median seconds of one ``a @ b`` on ``dev``."""
    import torch

    torch_dtype = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }
    # A private generator: measuring at fit start (after a resume restored the RNG) must not move the
    # user's random streams, or dropout masks shift and the resumed run is no longer the same run.
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=torch_dtype[dtype], generator=g)
    b = torch.randn(n, n, device=dev, dtype=torch_dtype[dtype], generator=g)
    # On CPU there are no TF32 units: tf32 is fp32 there, and leaving the flag alone changes nothing.
    context = _tf32_enabled() if dtype == "tf32" else contextlib.nullcontext()
    time_once = _cuda_timer(dev) if dev.type == "cuda" else _cpu_timer
    with context, torch.inference_mode():
        for _ in range(warmup):
            time_once(lambda: a @ b)
        return statistics.median(time_once(lambda: a @ b) for _ in range(repeats))


def _cpu_timer(fn: Callable[[], Any]) -> float:
    # CPU kernels run synchronously: the clock can be read as soon as the call returns.
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _cuda_timer(dev) -> Callable[[Callable[[], Any]], float]:
    import torch

    def time_once(fn: Callable[[], Any]) -> float:
        with torch.cuda.device(dev):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)  # nothing queued before the start event
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0  # ms -> s

    return time_once


@contextlib.contextmanager
def _tf32_enabled() -> Iterator[None]:
    """Let float32 matmuls use TF32 tensor cores, restoring the caller's setting afterwards."""
    import torch

    previous_precision = torch.get_float32_matmul_precision()
    previous_allow = torch.backends.cuda.matmul.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous_precision)
        torch.backends.cuda.matmul.allow_tf32 = previous_allow


def _read_cache() -> dict[str, Any]:
    """The cache's entries; a missing, unreadable or corrupt file reads as empty (and is overwritten)."""
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _from_entry(entry: Any) -> PeakMeasurement | None:
    """A cached entry as a measurement, or None if it is not one (an older or hand-edited format)."""
    names = {f.name for f in fields(PeakMeasurement)} - {"cached"}
    if not isinstance(entry, dict) or set(entry) != names:
        return None
    try:
        result = PeakMeasurement(**entry, cached=True)
    except TypeError:
        return None
    valid = isinstance(result.flops_per_s, (int, float)) and result.flops_per_s > 0
    return result if valid else None


def _write_cache(cache: dict[str, Any]) -> None:
    """Write atomically (temp file + rename) so a crash or a concurrent reader never sees half a file, and
    only when the content changed.

    A cache that cannot be written (read-only home, full disk) only costs a re-measurement next time.
    """
    path = cache_path()
    if _read_cache() == cache:
        return
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".peaks.", delete=False) as tmp:
            tmp_name = tmp.name
            json.dump(cache, tmp, indent=2, sort_keys=True)
        os.replace(tmp_name, path)
    except OSError:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
