"""What a TensorFlow suite gets: the torch suites' ``BenchContext`` plus the TensorFlow device name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulab.measure.harness import BenchContext, Timing
from gpulab.measure.results import SuiteResult


@dataclass
class TfBenchContext(BenchContext):
    tf_device: str = "/CPU:0"

    def measure(self, fn: Any, **kwargs: Any) -> Timing:
        # The timed functions read their result back, which is TensorFlow's wait for the device; torch's
        # synchronize (the harness's) has nothing to wait for here.
        kwargs["device"] = "cpu"
        return super().measure(fn, **kwargs)


def tensorflow_side(result: SuiteResult, name: str) -> SuiteResult:
    """Title and plot files of a TensorFlow suite, apart from the torch suite's (same output directory)."""
    result.title += " (TensorFlow)"
    for plot in result.plots:
        plot.file = f"tf-{plot.file}"
        plot.title += " (TensorFlow)"
    return result
