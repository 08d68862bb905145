"""The callbacks every engine's fit runs by default, from the settings (one list, not one per engine)."""

from __future__ import annotations

import sys
from typing import Any

from gpulab.core.callbacks.base import Callback
from gpulab.core.callbacks.jsonl import JsonlLogger
from gpulab.core.callbacks.log_lines import LogLines
from gpulab.core.callbacks.nvml_sampler import NvmlSamplerCallback
from gpulab.core.callbacks.progress import ProgressBar
from gpulab.core.callbacks.trackers import tracker_callbacks


def default_callbacks(
    settings: Any, is_rank_zero: bool, reporters: list[Callback] | None = None
) -> list[Callback]:
    """Rank zero's reporters (``reporters`` first, e.g. the torch engine's MFU count), the NVML sampler,
    the progress display and the file loggers; other ranks run none."""
    s = settings
    if not is_rank_zero:
        return []
    # The reporters first: the progress bar and the loggers then see what they add to the metrics.
    out: list[Callback] = list(reporters or [])
    out.append(NvmlSamplerCallback())  # silent (no thread) without an NVIDIA GPU
    if s.progress if s.progress is not None else sys.stdout.isatty():
        out.append(ProgressBar())
    elif s.progress is None:  # no terminal (a CI log, nohup, a pipe): plain lines, never silent
        out.append(LogLines())
    if s.out_dir:
        out.append(JsonlLogger(f"{s.out_dir}/metrics.jsonl"))
    return out + tracker_callbacks(s)  # TensorBoard, MLflow, W&B as `trackers` says
