"""The TensorFlow engine's words for the diagnosis's fixes (its ``diagnosis`` capability,
``measure.diagnosis_advice.Advice``): the tf.data cache and prefetch, XLA, its strategies, each with the
settings it names; none of torch's (its settings validation refuses them). Imports no TensorFlow."""

from __future__ import annotations

from gpulab.measure.diagnosis_advice import Advice, Fix

# The busy-machine note (hardware.load): OMP_NUM_THREADS does not size TensorFlow's pools.
THREADS_HINT = " (TensorFlow's CPU threads competed with those processes)"


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


ADVICE = Advice(
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
    threads_hint=THREADS_HINT,
)
