"""Which values of the torch engine's speed knobs are worth a trial on this device for this recipe, and
why the rest are not: a knob value that cannot be fast here is never run, it is listed with the reason.

The knobs are settings of ``TrainerSettings``, so a chosen value goes into tuned.yaml as is. Precision
and batch size follow the same rules on every engine (``gpulab.measure.knobs``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from gpulab.engines.torch.devices import accelerator
from gpulab.measure.knobs import Candidate, Group

# The keys tune may change; everything else in the user's config is left as it is.
KNOBS = (
    "precision",
    "fuse_optimizer",
    "batch_size",
    "num_workers",
    "pin_memory",
    "activation_checkpointing",
    "channels_last",
    "compile",
    "compile_mode",
)


def compile_group(device: torch.device) -> Group:
    """torch.compile's modes where they can run: on a CPU the default only (max-autotune tunes GPU
    kernels, reduce-overhead replays CUDA graphs)."""
    group = Group("compile")
    modes = accelerator(device).compile_modes
    if not modes:
        group.reason = f"torch.compile is not tried on {device.type}"
        return group
    for mode in modes:
        group.candidates.append(
            Candidate(f"compile={mode or 'default'}", {"compile": True, "compile_mode": mode})
        )
    if accelerator(device).is_host:
        group.skipped["max-autotune, reduce-overhead"] = "GPU only (Triton autotuning, CUDA graphs)"
    return group


def loader_group(data: Any, device: torch.device) -> Group:
    """DataLoader workers and pinned memory, for data that goes through a DataLoader the Trainer makes."""
    from gpulab.engines.torch.data.loaders import as_tensors, is_sample_list

    group = Group("num_workers")
    if isinstance(data, DataLoader):
        group.reason = "the recipe passes its own DataLoader, which keeps its own workers"
        return group
    if not is_sample_list(data) and as_tensors(data) is not None:
        group.reason = "the data are tensors: batches are sliced on the fast path, without a DataLoader"
        return group
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for workers in sorted({0, 2, min(8, max(cores - 1, 0))}):
        group.candidates.append(Candidate(f"num_workers={workers}", {"num_workers": workers}))
    if accelerator(device).pin_memory:
        group.candidates += [Candidate(f"pin_memory={pin}", {"pin_memory": pin}) for pin in (True, False)]
    return group


def checkpointing_group(model: nn.Module, memory_binds: bool, largest: int) -> Group:
    """Activation checkpointing of the repeated blocks, only when memory limits the batch."""
    group = Group("activation_checkpointing")
    if not memory_binds:
        group.reason = f"memory does not bind: the largest batch ({largest}) is the data's own size"
        return group
    blocks = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not blocks:
        group.reason = "the model has no nn.ModuleList of blocks to checkpoint"
        return group
    name = type(max(blocks, key=len)[0]).__name__
    group.candidates.append(
        Candidate(f"activation_checkpointing={name}", {"activation_checkpointing": [name]})
    )
    return group


def channels_last_group(model: nn.Module, device: torch.device, current: bool | str) -> Group:
    """The channels_last memory format for conv nets: the other of what ``current`` does on this device
    (``auto``: on for conv nets on CUDA, off elsewhere)."""
    group = Group("channels_last")
    if not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        group.reason = "the model has no Conv2d"
    else:
        now = accelerator(device).channels_last_fast if current == "auto" else bool(current)
        group.candidates.append(
            Candidate(f"channels_last={str(not now).lower()}", {"channels_last": not now})
        )
    return group


def fused_group(default: bool) -> Group:
    """The fused optimizer kernels on or off (on is the default; off only matters if on is slower)."""
    return Group(
        "fuse_optimizer", [Candidate(f"fuse_optimizer={not default}", {"fuse_optimizer": not default})]
    )
