"""The precisions and strategies, once, as data: no framework imported.

Every reader takes its facts from here: config's choices, the CLI's help, the torch Precision classes
(runtime/precision.py), the TensorFlow engine's Keras policies (engines/tensorflow/precision.py), FLOP
peaks and MFU (measure/flops.py), the diagnosis and tune. Adding a precision is a row here plus, where an
engine needs new code for it, that engine (docs/ARCHITECTURE.md, "How to add a precision").
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.errors import ConfigError, choices

AUTO = "auto"  # each engine picks: the fastest native precision of the device


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


def get(name: str) -> PrecisionSpec:
    """The spec of a resolved precision; an unknown name (``auto`` included) is an error, never a default."""
    spec = PRECISIONS.get(name)
    if spec is None:
        raise ConfigError(f"unknown precision {name!r}; valid: {choices(PRECISIONS)}")
    return spec


@dataclass(frozen=True)
class StrategySpec:
    name: str
    engines: tuple[str, ...]  # the engines that have it
    description: str


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec(
            "auto", ("torch", "tensorflow"), "the engine picks: one device, or all the launched ones"
        ),
        StrategySpec("single", ("torch", "tensorflow"), "one device"),
        StrategySpec("ddp", ("torch",), "DistributedDataParallel: one process per device"),
        StrategySpec("fsdp2", ("torch",), "FSDP2: parameters sharded over the processes"),
        StrategySpec("dp", ("torch",), "DataParallel: one process, several GPUs"),
        StrategySpec("mirrored", ("tensorflow",), "MirroredStrategy: the GPUs of one machine"),
        StrategySpec("multiworker", ("tensorflow",), "MultiWorkerMirroredStrategy: TF_CONFIG's workers"),
    )
}


def strategies_of(engine: str) -> tuple[str, ...]:
    """The strategy names ``engine`` has, in the table's order."""
    return tuple(name for name, spec in STRATEGIES.items() if engine in spec.engines)
