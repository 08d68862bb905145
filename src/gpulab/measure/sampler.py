"""GPU utilisation, memory and power sampled through NVML in a background thread while training runs.

A daemon thread reads ``hardware.nvml.read_gpu`` every ``interval_s`` and keeps running means and
maxima, so memory does not grow with the length of the run. NVML calls take tens of microseconds and
release the GIL, so the training loop does not notice. On a machine without NVIDIA's driver, without
a GPU, or for a CPU device the sampler starts no thread and its summary says why: never an error.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_FIELDS = ("utilization_gpu_pct", "utilization_memory_pct", "memory_used_bytes", "power_w")


@dataclass
class _Running:
    count: int = 0
    total: float = 0.0
    peak: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.peak = value if self.peak is None else max(self.peak, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass
class SamplerSummary:
    """What the samples say: means and maxima per field (None where NVML could not read it)."""

    available: bool
    reason: str
    samples: int = 0
    interval_s: float = 0.0
    physical_index: int | None = None
    name: str | None = None
    mean: dict[str, float | None] = field(default_factory=dict)
    max: dict[str, float | None] = field(default_factory=dict)

    @property
    def gpu_utilization_pct(self) -> float | None:
        return self.mean.get("utilization_gpu_pct")

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "samples": self.samples,
            "interval_s": self.interval_s,
            "physical_index": self.physical_index,
            "name": self.name,
            "mean": self.mean,
            "max": self.max,
        }


class NvmlSampler:
    """``start()`` a sampling thread for ``device``; ``stop()`` returns the ``SamplerSummary``.

    Also a context manager. ``device`` is torch's (``cuda:1``); the physical GPU NVML reads is found
    through ``CUDA_VISIBLE_DEVICES``.
    """

    def __init__(self, device: Any, interval_s: float = 0.5) -> None:
        self.device = _Device.parse(str(device))  # torch's device or its name: no torch import needed
        self.interval_s = float(interval_s)
        self._stats = {name: _Running() for name in _FIELDS}
        self._window = {name: _Running() for name in _FIELDS}
        self._samples = 0
        self._name: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._index, self._reason = self._resolve()

    def _resolve(self) -> tuple[int | None, str]:
        if self.device.type != "cuda":
            return None, f"no NVML sampling on {self.device.type}"
        from gpulab.hardware.nvml import nvml_status, physical_index_for

        ok, reason = nvml_status()
        if not ok:
            return None, reason
        torch_index = self.device.index if self.device.index is not None else _current_cuda_device()
        index = physical_index_for(torch_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if index is None:
            return None, f"cannot tell which physical GPU cuda:{torch_index} is"
        return index, "ok"

    @property
    def available(self) -> bool:
        return self._index is not None

    def start(self) -> NvmlSampler:
        if self.available and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpulab-nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        """Take one reading now (the thread calls this; a test may too)."""
        if self._index is None:
            return
        from gpulab.hardware.nvml import read_gpu

        reading = read_gpu(self._index)
        if not reading.available:
            return
        with self._lock:
            self._samples += 1
            self._name = reading.name
            for name, stat in self._stats.items():
                value = getattr(reading, name)
                if value is not None:
                    stat.add(float(value))
                    self._window[name].add(float(value))

    def take_window(self) -> dict[str, float | None]:
        """Means since the previous call (for per-log metrics), then start a new window."""
        with self._lock:
            means = {name: stat.mean for name, stat in self._window.items()}
            self._window = {name: _Running() for name in _FIELDS}
        return means

    def stop(self) -> SamplerSummary:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(1.0, 2 * self.interval_s))
            self._thread = None
        return self.summary()

    def summary(self) -> SamplerSummary:
        with self._lock:
            return SamplerSummary(
                available=self.available and self._samples > 0,
                reason=self._reason if self._samples or not self.available else "no samples taken",
                samples=self._samples,
                interval_s=self.interval_s,
                physical_index=self._index,
                name=self._name,
                mean={k: s.mean for k, s in self._stats.items()},
                max={k: s.peak for k, s in self._stats.items()},
            )

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for_samples(sampler: NvmlSampler, count: int, timeout_s: float = 5.0) -> bool:
    """Block until ``sampler`` has ``count`` samples (tests and short profiles); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sampler.summary().samples >= count:
            return True
        time.sleep(0.01)
    return False


@dataclass(frozen=True)
class _Device:
    type: str
    index: int | None

    @classmethod
    def parse(cls, name: str) -> _Device:
        kind, _, index = name.partition(":")
        return cls(kind, int(index) if index else None)


def _current_cuda_device() -> int:
    import torch  # only for a bare "cuda", which only torch's callers pass

    return torch.cuda.current_device()
