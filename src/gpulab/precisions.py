"""The precisions and strategies, once, as data: no framework imported.

Every reader takes its facts from here: config's choices, the CLI's help, the torch Precision classes
(engines/torch/runtime/precision.py), the TensorFlow engine's Keras policies
(engines/tensorflow/precision.py), FLOP peaks and MFU (engines/torch/measure/flops.py), the diagnosis and
tune; and ``precision: auto`` is one rule here (``auto``), fed by each engine's device facts. Adding a
precision is a row here plus, where an engine needs new code for it, that engine (docs/ARCHITECTURE.md,
"How to add a precision"); a plugin (or a test) adds a row at run time with ``register_precision``, a
strategy with ``register_strategy``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.errors import ConfigError, choices

AUTO = "auto"  # the fastest native precision of the device: ``auto`` below, for every engine


@dataclass(frozen=True)
class PrecisionSpec:
    name: str
    compute_dtype: str  # the dtype of activations and matmuls ("float32", "bfloat16", "float16")
    tf32: bool  # float32 matmuls on TensorFloat-32 units (Ampere+ GPUs)
    loss_scaling: bool  # a dynamic loss scaler guards the gradients against fp16's narrow range
    peak_dtype: str  # the datasheet/measured peak MFU is taken against: fp32, tf32, bf16, fp16
    keras_policy: str  # Keras's DTypePolicy name (variables stay float32)

    @property
    def mixed(self) -> bool:
        """Computes in a 16-bit type with float32 weights."""
        return self.compute_dtype != "float32"


_ROWS = (
    # (name, compute dtype, tf32, loss scaling, peak dtype for MFU, Keras policy)
    ("fp32", "float32", False, False, "fp32", "float32"),
    ("tf32", "float32", True, False, "tf32", "float32"),
    ("bf16-mixed", "bfloat16", False, False, "bf16", "mixed_bfloat16"),
    ("fp16-mixed", "float16", False, True, "fp16", "mixed_float16"),
)
PRECISIONS: dict[str, PrecisionSpec] = {row[0]: PrecisionSpec(*row) for row in _ROWS}
NAMES = (AUTO, *PRECISIONS)  # what a user may ask for
HELP = "|".join(NAMES)


def register_precision(spec: PrecisionSpec) -> None:
    """A row added at run time (a plugin's, a test's), read from then on by every reader the module's
    docstring names. The CLI's help is built once a process, at the first ``gpulab.cli.main``: a plugin
    registers before it."""
    global NAMES, HELP
    PRECISIONS[spec.name] = spec
    NAMES = (AUTO, *PRECISIONS)
    HELP = "|".join(NAMES)


@dataclass(frozen=True)
class DeviceFacts:
    """What ``auto`` needs of a device, as each engine reads it from its framework: its kind (``cuda`` for a
    CUDA or ROCm GPU, ``cpu``, ``mps``, ...), its name for the reason, and a CUDA GPU's compute capability
    (None where the framework does not say)."""

    kind: str
    name: str
    capability: tuple[int, int] | None = None


def auto(device: DeviceFacts) -> tuple[str, str]:
    """``precision: auto`` on any engine: (precision, why), from what the part computes fast, not from what
    a framework can run (torch "supports" bf16 on pre-Ampere GPUs by emulating it, and fp16 on Pascal
    consumer parts at 1/64 of fp32), so one device gets one answer whichever engine trains on it."""
    from gpulab.hardware.native_dtypes import native_on_cuda

    if device.kind != "cuda":
        return "fp32", f"{device.kind}: fp32, as mixed precision seldom speeds training up on this device"
    if device.capability is None:
        return "fp32", f"{device.name}: fp32, as its compute capability is unknown"
    major, minor = device.capability
    where = f"{device.name} (compute capability {major}.{minor})"
    if native_on_cuda("bf16", (major, minor)):
        return "bf16-mixed", f"{where} has native bfloat16: bf16-mixed, no loss scaler"
    if native_on_cuda("fp16", (major, minor)):
        return "fp16-mixed", f"{where} has no native bfloat16: fp16-mixed with a dynamic loss scaler"
    return "fp32", f"{where} has no tensor cores: fp32, as fp16 and bf16 run slower than it there"


def get(name: str) -> PrecisionSpec:
    """The spec of a resolved precision; an unknown name (``auto`` included) is an error, never a default."""
    spec = PRECISIONS.get(name)
    if spec is None:
        raise ConfigError(f"unknown precision {name!r}; valid: {choices(PRECISIONS)}")
    return spec


@dataclass(frozen=True)
class StrategySpec:
    name: str
    description: str


# Every strategy name config takes; which engine has which is the engine's word (its ``lacks``).
STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec("auto", "the engine picks: one device, or all the launched ones"),
        StrategySpec("single", "one device"),
        StrategySpec("ddp", "DistributedDataParallel: one process per device"),
        StrategySpec("fsdp2", "FSDP2: parameters sharded over the processes"),
        StrategySpec("dp", "DataParallel: one process, several GPUs"),
        StrategySpec("mirrored", "MirroredStrategy: the GPUs of one machine"),
        StrategySpec("multiworker", "MultiWorkerMirroredStrategy: TF_CONFIG's workers"),
    )
}


def register_strategy(spec: StrategySpec) -> None:
    """A strategy added at run time: config takes its name from then on, and each engine that has it
    says so in its ``lacks`` (docs/ARCHITECTURE.md, "How to add a strategy")."""
    STRATEGIES[spec.name] = spec
