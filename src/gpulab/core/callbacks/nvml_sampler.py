"""``NvmlSamplerCallback``: GPU utilisation, memory and power sampled in a background thread during fit.

The sampler (``profiling.sampler.NvmlSampler``) runs from ``on_fit_start`` to ``on_fit_end`` in a daemon
thread; every log gets the means since the previous log (``gpu_util_pct``, ``gpu_memory_used_bytes``,
``gpu_power_w``), and the run gets means and maxima in ``summary()``. On a CPU, without NVIDIA's driver
or without nvidia-ml-py it starts nothing and adds nothing: silent, never an error.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpulab.core.callbacks.base import Callback

_LOGGED = {
    "utilization_gpu_pct": "gpu_util_pct",
    "memory_used_bytes": "gpu_memory_used_bytes",
    "power_w": "gpu_power_w",
}


class NvmlSamplerCallback(Callback):
    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.sampler = None
        self._summary: dict[str, Any] = {}
        self._windows: list[float] = []  # utilisation of each log window: the steady figure's samples

    def on_fit_start(self, trainer, state):
        from gpulab.measure.sampler import NvmlSampler

        self.sampler = NvmlSampler(trainer.context.gpu or "cpu", self.interval_s).start()

    def on_log(self, trainer, state, metrics):
        if self.sampler is None or not self.sampler.available:
            return
        window = self.sampler.take_window()
        if window.get("utilization_gpu_pct") is not None:
            self._windows.append(float(window["utilization_gpu_pct"]))
        metrics.update({_LOGGED[k]: v for k, v in window.items() if k in _LOGGED and v is not None})

    def on_fit_end(self, trainer, state, result):
        if self.sampler is None:
            return
        self._summary = self.sampler.stop().to_json()
        steady = _steady(self._windows)
        if steady is not None:
            self._summary["steady_utilization_gpu_pct"] = steady
        extras = getattr(result, "extras", None)
        if isinstance(extras, dict):
            extras["nvml"] = self._summary

    @property
    def steady_utilization_pct(self) -> float | None:
        return self._summary.get("steady_utilization_gpu_pct")

    @property
    def gpu_utilization_pct(self) -> float | None:
        """Mean utilisation over the fit (None without samples): the diagnosis's input."""
        return (self._summary.get("mean") or {}).get("utilization_gpu_pct") if self._summary else None

    def summary(self) -> dict[str, Any]:
        return dict(self._summary)


def _steady(windows: list[float]) -> float | None:
    """The median utilisation of the log windows after the first: the first holds compilation and warm-up,
    and a window that spans validation or a checkpoint write is an outlier the median ignores. The whole
    fit's mean counted those as idle GPU and called a 38 %-MFU compiled run "host-bound" (H100, 2026-11-26).
    None with fewer than two steady windows (a short run: the mean is all there is)."""
    steady = windows[1:]
    return statistics.median(steady) if len(steady) >= 2 else None
