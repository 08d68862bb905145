"""Callbacks, one per file: the base hooks, the progress bar, JSONL and TensorBoard loggers."""

from gpulab.core.callbacks.base import Callback, CallbackList
from gpulab.core.callbacks.defaults import default_callbacks
from gpulab.core.callbacks.jsonl import JsonlLogger
from gpulab.core.callbacks.progress import ProgressBar
from gpulab.core.callbacks.tensorboard import TensorBoardLogger

__all__ = ["Callback", "CallbackList", "JsonlLogger", "ProgressBar", "TensorBoardLogger", "default_callbacks"]
