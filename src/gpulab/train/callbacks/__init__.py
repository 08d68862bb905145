"""Callbacks, one per file: the base hooks, the progress bar, JSONL and TensorBoard loggers."""

from gpulab.train.callbacks.base import Callback, CallbackList
from gpulab.train.callbacks.jsonl import JsonlLogger
from gpulab.train.callbacks.progress import ProgressBar
from gpulab.train.callbacks.tensorboard import TensorBoardLogger

__all__ = ["Callback", "CallbackList", "JsonlLogger", "ProgressBar", "TensorBoardLogger"]
