"""Each engine's words for the diagnosis's fixes, and the settings each fix names (``diagnosis.py``).

A fix is advice the user acts on, so it names only what the engine that ran takes: torch's DataLoader
workers, pinned memory, torch.compile modes, activation checkpointing and FSDP; TensorFlow's tf.data cache
and prefetch, XLA and its strategies (its settings validation refuses torch's: a TensorFlow run once
advised ``--set num_workers=N``). Each phrase comes with the settings it names, as that engine takes them,
so a test can put every one through the engine's validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Fix = tuple[str, dict[str, Any]]  # the words, the settings they name


@dataclass(frozen=True)
class Advice:
    compile: str  # how to compile the step, with its flag
    host_sync: str  # the calls that wait for the device inside a step
    input: Callable[[bool], Fix]  # on a GPU (True) or the CPU
    communication: Fix
    fewer_launches: Callable[[bool], Fix]  # compiled already (True) or not
    capacity: Fix  # free memory (after a lower precision, which diagnosis.py adds)
    scale_out: Fix  # more devices


def _torch_input(on_gpu: bool) -> Fix:
    if on_gpu:
        return (
            "feed faster: more DataLoader workers (--set num_workers=N), pinned memory "
            "(--set pin_memory=true) and a deeper prefetch (--set prefetch_factor=4); or give tensors "
            "(kept on the GPU) instead of a per-sample Dataset, and decode/augment once ahead of training "
            "or on the GPU",
            {"num_workers": 4, "pin_memory": True, "prefetch_factor": 4},
        )
    return (
        "feed faster: DataLoader workers (--set num_workers=N) so samples load in parallel with "
        "compute; cache decoded samples, or give tensors instead of a per-sample Dataset",
        {"num_workers": 2},
    )


def _torch_launches(compiled: bool) -> Fix:
    if compiled:
        return "CUDA graphs (--set compile_mode=reduce-overhead)", {"compile_mode": "reduce-overhead"}
    return (
        "torch.compile (--compile; --set compile_mode=reduce-overhead adds CUDA graphs)",
        {"compile": True, "compile_mode": "reduce-overhead"},
    )


def _tf_input(on_gpu: bool) -> Fix:
    return (
        "feed faster: keep the tf.data source in memory (--set data_cache=true) and prefetch deeper "
        "(--set prefetch_factor=4); decode/augment once ahead of training"
        + (", or on the GPU" if on_gpu else ""),
        {"data_cache": True, "prefetch_factor": 4},
    )


def _tf_launches(compiled: bool) -> Fix:
    if compiled:
        return "fewer, larger steps (XLA compiles the step already)", {}
    return "XLA (--compile) to fuse the step", {"compile": True}


TORCH = Advice(
    compile="torch.compile (--compile)",
    host_sync=".item(), printing tensors",
    input=_torch_input,
    communication=(
        "more work per collective: a larger batch per rank or gradient accumulation (--accumulate N: fewer "
        "all-reduces), bf16 gradients, bigger DDP buckets (--set ddp_bucket_cap_mb=100); or fewer, "
        "faster-connected ranks",
        {"accumulate": 4, "ddp_bucket_cap_mb": 100.0},
    ),
    fewer_launches=_torch_launches,
    capacity=(
        "activation checkpointing of the large blocks (--set activation_checkpointing=Block), "
        "micro_batch: auto (--set micro_batch=auto: smaller micro-batches, same effective batch), or FSDP "
        "(--set strategy=fsdp2) to shard the state",
        {"activation_checkpointing": ["Block"], "micro_batch": "auto", "strategy": "fsdp2"},
    ),
    scale_out=("add GPUs (--set strategy=ddp; fsdp2 to shard a large model)", {"strategy": "ddp"}),
)

TENSORFLOW = Advice(
    compile="XLA (--compile)",
    host_sync=".numpy(), printing tensors",
    input=_tf_input,
    communication=(
        "more work per collective: a larger batch per replica or gradient accumulation (--accumulate N: "
        "fewer all-reduces); or fewer, faster-connected workers",
        {"accumulate": 4},
    ),
    fewer_launches=_tf_launches,
    capacity=(
        "a smaller batch (--batch-size) with gradient accumulation (--accumulate N: the same effective "
        "batch)",
        {"batch_size": 32, "accumulate": 2},
    ),
    scale_out=(
        "add GPUs (--set strategy=mirrored on one host, multiworker across hosts)",
        {"strategy": "mirrored"},
    ),
)

# engine name -> its advice; a run that names none is torch's (config's default engine)
ADVICE = {"torch": TORCH, "tensorflow": TENSORFLOW}


def advice_for(engine: str | None) -> Advice:
    return ADVICE.get(engine or "torch", TORCH)
