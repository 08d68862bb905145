"""Callbacks, one per file: the base hooks (``base``) and the default list (``defaults``), the progress bar,
the log lines, the JSONL logger, the NVML sampler, preemption, and the trackers (``trackers`` picks them:
TensorBoard, MLflow, W&B), which hand their records over in batches alike (``hand_over``), share their run
ids and settings (``tracker_record``) and replay what a resume missed (``tracker_replay``)."""

from gpulab.core.callbacks.base import Callback, CallbackList
from gpulab.core.callbacks.defaults import default_callbacks
from gpulab.core.callbacks.jsonl import JsonlLogger
from gpulab.core.callbacks.progress import ProgressBar
from gpulab.core.callbacks.tensorboard import TensorBoardLogger

__all__ = ["Callback", "CallbackList", "JsonlLogger", "ProgressBar", "TensorBoardLogger", "default_callbacks"]
