"""Which TensorFlow device a fit runs on, and its memory settings.

``device`` means what it means on torch: ``cpu`` -> ``/CPU:0``, ``cuda[:N]`` -> ``/GPU:N``, ``auto`` -> the
first GPU TensorFlow sees, else the CPU. GPUs get memory growth (TensorFlow would otherwise map all their
memory at start) and ``memory_limit`` becomes a logical device of that size. Both must be set before
TensorFlow initialises its devices; once it has, a different request is one line, not a crash.
"""

from __future__ import annotations

from typing import Any

from gpulab.errors import DeviceError
from gpulab.precisions import DeviceFacts


def device_name(tf: Any, device: str) -> str:
    """``/CPU:0`` or ``/GPU:N`` for a gpulab device string (validated by config/schema.py)."""
    gpus = tf.config.list_physical_devices("GPU")
    kind, _, index = device.partition(":")
    if kind == "auto":
        return "/GPU:0" if gpus else "/CPU:0"
    if kind == "cpu":
        return "/CPU:0"
    n = int(index or 0)
    if n >= len(gpus):
        raise DeviceError(
            f"device {device!r}: TensorFlow sees {len(gpus)} GPU(s); use cpu or one of "
            f"{', '.join(f'cuda:{i}' for i in range(len(gpus))) or 'none'} (gpulab doctor shows why)"
        )
    return f"/GPU:{n}"


def device_facts(tf: Any, name: str) -> DeviceFacts:
    """``/CPU:0`` or ``/GPU:N`` as ``precision: auto`` reads a device (precisions.auto): a GPU's compute
    capability as TensorFlow reports it (None where it reports none)."""
    if not name.startswith("/GPU"):
        return DeviceFacts("cpu", name)
    gpus = tf.config.list_physical_devices("GPU")
    index = int(name.rpartition(":")[2])
    details = tf.config.experimental.get_device_details(gpus[index]) if index < len(gpus) else {}
    capability = details.get("compute_capability")
    return DeviceFacts("cuda", name, tuple(capability) if capability else None)


def configure_memory(tf: Any, name: str, memory_limit: int | float | None) -> dict[str, Any]:
    """Memory growth on every GPU; ``memory_limit`` (bytes, or a fraction of the GPU) on the one used.

    On the CPU TensorFlow has no limit to set: the limit is recorded, as on torch's CPU path.
    Returns what was applied, read back from ``tf.config``.
    """
    applied: dict[str, Any] = {"memory_growth": None, "memory_limit_mb": None}
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return applied
    gpu = gpus[int(name.rpartition(":")[2])] if name.startswith("/GPU") else None
    try:
        for g in gpus:
            if memory_limit is None or g is not gpu:
                tf.config.experimental.set_memory_growth(g, True)
        if gpu is not None and memory_limit is not None:
            mb = _limit_mb(tf, name, memory_limit)
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=mb)]
            )
    except RuntimeError as exc:  # "Physical devices cannot be modified after being initialized"
        raise DeviceError(
            f"TensorFlow's GPUs were initialised before gpulab could set memory growth/memory_limit "
            f"({exc}); start the fit before any other TensorFlow work in this process"
        ) from None
    if gpu is not None:
        applied["memory_growth"] = tf.config.experimental.get_memory_growth(gpu)
        logical = tf.config.get_logical_device_configuration(gpu)
        applied["memory_limit_mb"] = logical[0].memory_limit if logical else None
    return applied


def _limit_mb(tf: Any, name: str, limit: int | float) -> int:
    if isinstance(limit, int):
        return max(1, limit // 2**20)
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    total = details.get("memory_limit") or 0
    if not total:
        raise DeviceError(
            f"memory_limit={limit} is a fraction, but TensorFlow does not report {name}'s memory size; "
            "give bytes instead"
        )
    return max(1, int(total * limit) // 2**20)


def split_cpu(tf: Any, n: int) -> None:
    """``n`` logical CPUs (for MirroredStrategy without GPUs, as Keras's own tests do); before TF starts."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
