"""The knobs ``gpulab tune`` tries on the TensorFlow engine, and why others are not tried there.

Precision (the same rule as torch's: fp32 and the mixed precisions the device computes natively), batch
size (larger ones up to the data's size: TensorFlow has no batch search, a batch that does not fit is a
failed trial that prunes the larger ones), the ``tf.data`` pipeline's cache and prefetch depth, and XLA
(``compile``) last, since each XLA trial pays its compile.
"""

from __future__ import annotations

from typing import Any

from gpulab.artifact.arrays import leaves
from gpulab.engines.tensorflow.data import CACHE_LIMIT_BYTES, as_arrays, caches, num_samples
from gpulab.measure.knobs import Candidate, DeviceName, Group, batch_group, precision_group

KNOBS = ("precision", "batch_size", "data_cache", "prefetch_factor", "compile")
PREFETCH_DEPTHS = (1, 4)  # batches ahead, against the default tf.data.AUTOTUNE

# The torch knobs with no TensorFlow counterpart, and why (listed among the skipped, so tune.json says).
NOT_ON_TENSORFLOW = {
    "fuse_optimizer": "Keras optimizers have no fused-kernel switch",
    "num_workers": "the tf.data pipeline has no worker processes (its cache and prefetch are tuned)",
    "activation_checkpointing": "not available on the TensorFlow engine",
    "channels_last": "TensorFlow's images are already NHWC (channels last)",
}


def torch_device(tf_device: str) -> DeviceName:
    """``/GPU:N`` -> cuda:N, anything else -> cpu: the device as the native-precision rules name it (no
    torch: this engine's tune runs without it)."""
    if tf_device.startswith("/GPU"):
        return DeviceName("cuda", int(tf_device.rpartition(":")[2]))
    return DeviceName("cpu")


def groups(config: Any, recipe: Any, device: DeviceName, resolved_precision: str) -> list[Group]:
    """Every TensorFlow knob's group, in the order the search walks them."""
    arrays = as_arrays(recipe.train_data)
    rows = num_samples(arrays)
    return [
        precision_group(device, resolved_precision),
        *[Group(knob, reason=why) for knob, why in NOT_ON_TENSORFLOW.items()],
        batch_group(int(config.batch_size), rows, rows),
        cache_group(arrays, config.data_cache),
        prefetch_group(config.prefetch_factor),
        xla_group(),
    ]


def cache_group(arrays: tuple, setting: bool | str) -> Group:
    """The source cached or not: the other of what the setting does now (not a cache over the limit,
    which could exhaust host memory)."""
    group = Group("data_cache")
    size = sum(a.nbytes for a in leaves(arrays))
    if caches(arrays, setting):
        group.candidates.append(Candidate("data_cache=false", {"data_cache": False}))
    elif size > CACHE_LIMIT_BYTES:
        gib = size / 2**30
        group.reason = f"the arrays take {gib:.1f} GiB, over the {CACHE_LIMIT_BYTES >> 30} GiB cache limit"
    else:
        group.candidates.append(Candidate("data_cache=true", {"data_cache": True}))
    return group


def prefetch_group(current: int | None) -> Group:
    """Fixed prefetch depths against the current one (None: tf.data.AUTOTUNE)."""
    group = Group("prefetch_factor")
    depths = [d for d in PREFETCH_DEPTHS if d != current]
    group.candidates = [Candidate(f"prefetch_factor={d}", {"prefetch_factor": d}) for d in depths]
    if current is not None:
        group.candidates.append(Candidate("prefetch_factor=AUTOTUNE", {"prefetch_factor": None}))
    return group


def xla_group() -> Group:
    """The step compiled by XLA (``compile: true`` on this engine); no modes to choose."""
    return Group("compile", [Candidate("compile=xla", {"compile": True})])
