"""The torch engine's words for the diagnosis's fixes (its ``diagnosis`` capability, an
``measure.diagnosis_advice.Advice``): DataLoader workers, pinned memory, torch.compile and CUDA graphs, DDP
buckets, activation checkpointing, micro-batches and FSDP, each with the settings it names. No torch."""

from __future__ import annotations

from gpulab.engines.torch.train import THREADS_HINT
from gpulab.measure.diagnosis_advice import Advice, Fix


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


ADVICE = Advice(
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
    threads_hint=THREADS_HINT,
)
