"""The one way a bench figure is measured: warm-up, device synchronised around every clock read,
repeats, and the median with its spread.

``measure(fn)`` returns a ``Timing`` (the raw samples); a ``Figure`` is what gets stored: a value with
its unit, how many repeats it came from, and the spread of those repeats, so that every number in
``results.json`` can be judged against its own noise (``gpulab bench compare`` does exactly that).

Peak memory is measured the same way, per repeat: CUDA's allocator peak on a GPU; on the CPU, the
growth of the process's resident set during the call (see ``cpu_peak_rss_growth`` for how it is made
honest).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab.hardware.host_memory import proc_status_bytes
from gpulab.measure.device_seam import DeviceSeam, seam_of
from gpulab.measure.results import Figure, Row, spread_of

if TYPE_CHECKING:
    import torch

# The harness imports no framework: a device is asked through its engine's seam (measure/device_seam.py),
# so the TensorFlow engine's bench (its parent process and its worker's CPU timings) loads no torch.

MIB = 2**20


@dataclass(frozen=True)
class Timing:
    """Seconds per call, one sample per repeat (each sample may average ``inner`` back-to-back calls)."""

    samples: tuple[float, ...]
    inner: int = 1

    @property
    def repeats(self) -> int:
        return len(self.samples)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread_s(self) -> tuple[float, float]:
        low, high, _ = spread_of(sorted(self.samples))
        return low, high

    def seconds(self, unit: str = "ms") -> Figure:
        """The time per call as a figure in s, ms or us (lower is better)."""
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        return Figure.from_samples([s * scale for s in self.samples], unit, "lower")

    def rate(self, work_per_call: float, unit: str, scale: float = 1.0) -> Figure:
        """Work per second (samples/s, TFLOP/s with ``scale=1e-12``, GB/s), one value per sample."""
        return Figure.from_samples([work_per_call * scale / s for s in self.samples], unit, "higher")


def measure(
    fn: Callable[[], Any],
    *,
    device: DeviceSeam | str,
    warmup: int = 2,
    repeats: int = 5,
    min_sample_s: float = 0.0,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then time ``repeats`` samples of it.

    The device is synchronised before each clock read, so a sample covers the work ``fn`` queued and
    nothing else. Calls too short for the clock (a small kernel on a GPU) are batched: with
    ``min_sample_s`` each sample times as many back-to-back calls as fill it, and reports the mean.
    """
    device = seam_of(device)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats=}, {warmup=}")
    for _ in range(warmup):
        fn()
    inner = 1
    if min_sample_s > 0:
        once = _timed(fn, device, 1)
        inner = max(1, math.ceil(min_sample_s / max(once, 1e-9)))
    return Timing(tuple(_timed(fn, device, inner) for _ in range(repeats)), inner)


def synchronize(device: DeviceSeam | str) -> None:
    """Wait for the work queued on ``device`` (its seam's ``synchronize``; the CPU has none queued)."""
    seam_of(device).synchronize()


def _timed(fn: Callable[[], Any], device: DeviceSeam, inner: int) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / inner


# --------------------------------------------------------------------------------------------------------
# Peak memory


@dataclass(frozen=True)
class MemoryReading:
    """What ``peak_memory`` measured, or why it could not."""

    figure: Figure | None
    kind: str  # what the number is, in words, for notes and the report


# A CPU reading is the growth of the resident set, which Python's own small allocations and glibc's heap
# move too: steps whose tensors total under 0.1 MiB read 0-0.8 MiB, in any order (measured on the smoke
# profile). A reading whose smallest repeat is below this is not a measurement, so no figure is given.
CPU_RESOLUTION_MIB = 1.0


def missing_memory_note(rows: list[Row], name: Callable[[Row], str]) -> list[str]:
    """One note naming the rows that have no peak-memory figure and why (``info["no_peak_memory"]``)."""
    missing = [r for r in rows if "no_peak_memory" in r.info]
    if not missing:
        return []
    why = "; ".join(dict.fromkeys(r.info["no_peak_memory"] for r in missing))
    who = "any row" if len(missing) == len(rows) else ", ".join(name(r) for r in missing)
    return [f"No peak memory for {who}: {why}."]


def memory_kind(device: DeviceSeam | str) -> str:
    seam = seam_of(device)
    if seam.allocator_peaks:
        return seam.peak_description
    return (
        "peak growth of the process's resident memory during the call (VmHWM reset per repeat, "
        "glibc told to return large blocks to the OS so RSS follows live tensors)"
    )


def peak_memory(fn: Callable[[], Any], *, device: DeviceSeam | str, repeats: int = 2) -> MemoryReading:
    """Peak memory of one call of ``fn`` in MiB, once per repeat (call ``fn`` once before, to warm up):
    the allocator's peak where the device's seam has one, else the CPU's resident-set growth."""
    device = seam_of(device)
    kind = memory_kind(device)
    if device.allocator_peaks:
        samples = [_allocator_peak(fn, device) for _ in range(repeats)]
    elif device.is_host and cpu_peak_supported():
        with _malloc_returns_large_blocks():
            samples = [cpu_peak_rss_growth(fn) for _ in range(repeats)]
        if min(samples) / MIB < CPU_RESOLUTION_MIB:  # noise only adds: the smallest is the honest one
            return MemoryReading(None, f"below the {CPU_RESOLUTION_MIB:g} MiB a CPU reading resolves")
    else:
        return MemoryReading(None, f"peak memory not measurable on {device.type} here")
    return MemoryReading(Figure.from_samples([s / MIB for s in samples], "MiB", "lower"), kind)


def _allocator_peak(fn: Callable[[], Any], device: DeviceSeam) -> int:
    device.synchronize()
    device.reset_peak_memory()
    fn()
    device.synchronize()
    return device.peak_memory_bytes()


_CLEAR_REFS = Path("/proc/self/clear_refs")


def cpu_peak_supported() -> bool:
    """Linux lets a process reset its own high-water mark (``echo 5 > /proc/self/clear_refs``)."""
    if not sys.platform.startswith("linux") or _libc_mallopt() is None:
        return False
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return proc_status_bytes("VmHWM") is not None


def cpu_peak_rss_growth(fn: Callable[[], Any]) -> int:
    """Bytes the resident set grew above its level at the start of ``fn``, at its highest.

    Without help this under-reports: glibc keeps freed memory for reuse, so after the first call the
    step's tensors come from memory already resident and the high-water mark never moves. Inside
    ``_malloc_returns_large_blocks`` large blocks are mapped and unmapped per allocation, so the resident
    set follows the live tensors and its peak is the call's working memory (to page granularity).
    """
    # Free memory glibc still holds resident would be trimmed during ``fn`` (the trim threshold is low in
    # here), lowering the resident set below ``start``: the growth would read short. Give it back first.
    _libc_malloc_trim()
    start = proc_status_bytes("VmRSS") or 0
    _CLEAR_REFS.write_text("5")  # VmHWM := current RSS
    fn()
    return max(0, (proc_status_bytes("VmHWM") or 0) - start)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_THRESHOLD = 128 * 1024


def _libc() -> Any:
    """glibc, or None (another C library, another OS)."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _libc_mallopt() -> Callable[[int, int], int] | None:
    return getattr(_libc(), "mallopt", None)


def _libc_malloc_trim() -> None:
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@contextlib.contextmanager
def _malloc_returns_large_blocks() -> Iterator[None]:
    """Blocks from 64 KiB up are mmapped and given back on free; restored to glibc's 128 KiB after.

    Setting the thresholds at all switches off glibc's dynamic threshold for the rest of the process;
    that only changes where large blocks come from, not what is computed.
    """
    mallopt = _libc_mallopt()
    if mallopt is None:
        yield
        return
    mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
    mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)


# --------------------------------------------------------------------------------------------------------
# What a suite gets to work with


@dataclass
class BenchContext:
    """The settings every suite reads: where to run, how hard to try, and where to say what happens.

    ``profile`` is "full", "quick" or "smoke" (a hidden, tiny one for tests); each suite keeps a table of
    its own sizes per profile. ``repeats``/``warmup`` are the defaults a suite uses unless it says why
    it needs others.
    """

    device: torch.device | str  # a string where torch is not loaded (the TensorFlow engine's bench)
    profile: str = "full"
    warmup: int = 3
    repeats: int = 10
    memory_limit_bytes: int | None = None
    log: Callable[[str], None] = print
    graphs: Any = None  # the CUDA-graph backend of the cuda-graph variants; None: torch's (tests: a fake)
    accelerator: Any = None  # the device's seam from its engine (device_seam.py); None: the host's (a CPU)
    variants: tuple[str, ...] | None = None  # the transformer suite's rows asked for (--variants); None: all

    @property
    def on_gpu(self) -> bool:
        return str(self.device).partition(":")[0] == "cuda"

    @property
    def seam(self) -> DeviceSeam:
        """What the harness asks of ``device``: its engine's seam, or the host's for a CPU."""
        return seam_of(self.device if self.accelerator is None else self.accelerator)

    def pick(self, by_profile: dict[str, Any]) -> Any:
        """This profile's entry of a suite's ``{"full": ..., "quick": ..., "smoke": ...}`` table."""
        return by_profile[self.profile]

    def measure(self, fn: Callable[[], Any], **kwargs: Any) -> Timing:
        kwargs.setdefault("warmup", self.warmup)
        kwargs.setdefault("repeats", self.repeats)
        kwargs.setdefault("device", self.seam)
        return measure(fn, **kwargs)


PROFILES: dict[str, dict[str, int]] = {
    "full": {"warmup": 3, "repeats": 10},
    "quick": {"warmup": 2, "repeats": 5},
    "smoke": {"warmup": 1, "repeats": 2},
}
