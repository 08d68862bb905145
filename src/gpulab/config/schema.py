"""The settings schema (pydantic), free of any framework so that a second engine can share them: what each
setting is, its default, its choices and its checks.

Every model forbids unknown keys, and no number setting takes a boolean. Turning a dict into these models,
with one line per mistake, is ``validate.py``; reading YAML is ``yaml_files.py``; layering a CLI run's
sources is ``layering.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator
from pydantic_core import core_schema

from gpulab import engine_registry as engines
from gpulab import precisions as precision_table
from gpulab.errors import choices


class TableNames:
    """A setting whose valid values are a table's names, read when a value is checked, so a row registered
    at run time (``precisions.register_precision``) is taken; the settings reference reads ``names`` too."""

    def __init__(self, names: Callable[[], Iterable[str]]) -> None:
        self.names = names

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def check(self, value: Any) -> Any:
        if not isinstance(value, str) or value not in self.names():
            raise ValueError(f"valid choices: {choices(self.names())}")
        return value


Precision = Annotated[str, TableNames(lambda: precision_table.NAMES)]  # precisions.py's names
Strategy = Annotated[str, TableNames(lambda: precision_table.STRATEGIES)]
TRACKERS = ("tensorboard", "mlflow", "wandb")
Tracker = Literal["tensorboard", "mlflow", "wandb"]


class Settings(BaseModel):
    """Base for every settings model: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads True as 1 for an int (or float) field; YAML reads yes/on/true as True, so
        ``checkpoint_every: yes`` would silently become 1. A number is never a boolean here."""
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and _takes_a_number_not_a_bool(annotation):
            raise ValueError("Input should be a number, not a boolean (YAML reads yes/no/on/off as booleans)")
        return value


def _validate_device(value: str) -> str:
    """Syntax only (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``, ``xpu:N``); whether the
    device exists is the hardware layer's question."""
    kind, _, index = value.partition(":")
    if kind not in ("auto", "cpu", "cuda", "mps", "xpu") or (index and not index.isdigit()):
        raise ValueError(f"device {value!r} is not one of auto|cpu|cuda|cuda:N|mps|xpu|xpu:N")
    if index and kind in ("auto", "cpu", "mps"):
        raise ValueError(f"device {value!r}: only cuda and xpu take an index")
    return value


def _validate_engine(value: str) -> str:
    """One of the registry's names (``gpulab.engine_registry``: the built-ins and any registered at run
    time)."""
    if value not in engines.names():
        raise ValueError(f"valid choices: {choices(engines.names())}")
    return value


def _validate_batch_size(value: Any) -> int | str:
    """A positive integer (``"64"`` from a flag counts), or ``"auto"``."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError("Input should be greater than or equal to 1 (an integer), or 'auto'")
    return value


def _validate_memory_limit(value: Any) -> int | float | None:
    """Bytes (a positive integer) or a fraction of the device's memory (a float in (0, 1])."""
    ok_bytes = isinstance(value, int) and not isinstance(value, bool) and value > 0
    ok_fraction = isinstance(value, float) and 0.0 < value <= 1.0
    if value is not None and not (ok_bytes or ok_fraction):
        raise ValueError(
            "must be bytes (a positive integer) or a fraction of the device's memory (a float in (0, 1])"
        )
    return value


def _takes_a_number_not_a_bool(annotation: Any) -> bool:
    """``int``, ``float``, ``int | None``, ``int | Literal['auto']``, ...: a number type and no ``bool``."""
    args = set(get_args(annotation)) or {annotation}
    return bool(args & {int, float}) and bool not in args


class MlflowSettings(Settings):
    """Where ``trackers: [mlflow]`` logs (gpulab[mlflow])."""

    tracking_uri: str | None = Field(
        None, description="tracking server or store; None: MLFLOW_TRACKING_URI, else MLflow's default"
    )
    experiment: str | None = Field(
        None, description="experiment name; None: MLFLOW_EXPERIMENT_NAME, else 'gpulab'"
    )
    checkpoint_max_mb: float = Field(
        512.0, ge=0, description="the final checkpoint becomes an artifact when at most this size; 0: never"
    )


class WandbSettings(Settings):
    """Where ``trackers: [wandb]`` logs (gpulab[wandb])."""

    project: str | None = Field(None, description="W&B project; None: WANDB_PROJECT, else 'gpulab'")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="online|offline|disabled; None: WANDB_MODE, else W&B's default (online)"
    )


def _tracker_list(value: Any) -> Any:
    """One name is a list of one; each name once, in the order given."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return value  # a list of lists (YAML aliases, `[*x, *x]`): pydantic names the setting, one line
    return list(dict.fromkeys(value))


class TrainerSettings(Settings):
    """What ``Trainer(**settings)`` and ``gpulab train`` accept. Later issues add fields here."""

    # Set by config.validate.check_engine once it passed: a run's settings, checked before the framework
    # loads, reach the trainer as checked (RunConfig.trainer_settings carries it), and are not checked again
    _engine_checked: bool = PrivateAttr(default=False)
    device: str = Field("auto", description="auto|cpu|cuda|cuda:N|mps|xpu")
    precision: Precision = Field("auto", description="numeric policy for forward/backward")
    epochs: int = Field(1, ge=1, description="passes over the training data (max_steps wins if set)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    batch_size: int | Literal["auto"] = Field(
        32,
        description="samples per forward pass (per device); auto: the largest that fits, found by real "
        "steps at fit start (under memory_limit if set)",
    )
    accumulate: int = Field(1, ge=1, description="micro-batches per optimizer step")
    micro_batch: Literal["auto"] | None = Field(
        None,
        description="auto: on out-of-memory, halve the micro-batch, double accumulate and redo the step "
        "(same effective batch); None: an out-of-memory error stops the fit",
    )
    memory_limit: int | float | None = Field(
        None,
        description="this process's memory on the device: bytes, or a fraction of it (enforced on CUDA, "
        "recorded for batch_size: auto on the CPU); None: no limit",
    )
    mfu: bool = Field(
        False, description="count FLOPs and measure the peak at fit start, to log MFU (costs ~1 s)"
    )
    clip_grad_norm: float | None = Field(None, gt=0, description="max global gradient norm; None: off")
    compile: bool = Field(False, description="wrap the model in torch.compile (falls back with a warning)")
    fuse_optimizer: bool = Field(
        True,
        description="use the fused kernels of torch's Adam/AdamW/SGD when fused/foreach were left unset",
    )
    attention: Literal["auto", "flash", "efficient", "math", "cudnn"] = Field(
        "auto",
        description="the kernel scaled_dot_product_attention tries first, then torch's order; auto: torch's "
        "own order (cudnn first on Hopper and newer with a recent cuDNN, else flash)",
    )
    seed: int = Field(0, description="seed for Python, NumPy and torch")
    deterministic: bool = Field(False, description="ask torch for deterministic kernels")
    log_every: int = Field(50, ge=1, description="read and log metrics every N optimizer steps")
    compile_mode: str | None = Field(
        None, description="torch.compile mode: default|reduce-overhead|max-autotune"
    )
    compile_backend: str = Field("inductor", description="torch.compile backend (inductor, aot_eager, ...)")
    compile_check: bool = Field(
        False,
        description="compare the compiled model's first-batch loss and gradients with eager's (one extra "
        "forward and backward at fit start, on one process); where they differ, warn and train eagerly",
    )
    cuda_graph: bool | Literal["auto"] = Field(
        "auto",
        description="capture forward, backward and the optimizer step as one CUDA graph after 3 warm-up "
        "steps and replay it each step (one launch per step); auto (default): on one CUDA device, time "
        "replays against eager steps and keep the faster, said in one line; true: always; false: never; "
        "one line says why where it cannot (accumulate, ddp/fsdp2, a host read inside the step, ...)",
    )
    channels_last: bool | Literal["auto"] = Field(
        "auto",
        description="model and 4-D inputs in the NHWC memory format; auto: on for conv nets on CUDA, "
        "off on a CPU (not known to be faster there)",
    )
    model_inputs: list[str] | None = Field(
        None,
        description="the keys of a dict batch passed to the model's forward; None: those forward names "
        "(every key when it takes **kwargs)",
    )
    model_output: str | None = Field(
        None,
        description="the field of the model's output that holds the predictions (accuracy, export); None: "
        "the output tensor, its logits, or a tuple's first item",
    )
    activation_checkpointing: list[str] = Field(
        default_factory=list,
        description="module class names (one name or a list) whose activations are recomputed in backward",
    )
    init_scale: float = Field(2.0**16, gt=0, description="fp16-mixed: initial loss scale")
    growth_interval: int = Field(
        2000, ge=1, description="fp16-mixed: steps without overflow before the scale grows"
    )
    progress: bool | None = Field(
        None,
        description="progress bar; None: a bar when stdout is a terminal, else a plain line every 10 s; "
        "False: neither",
    )
    out_dir: str | None = Field(None, description="where metrics.jsonl, TensorBoard logs and checkpoints go")
    tensorboard: bool = Field(True, description="also log to TensorBoard under out_dir/tensorboard")
    trackers: list[Tracker] = Field(
        default_factory=lambda: ["tensorboard"],
        description="experiment trackers besides metrics.jsonl: tensorboard|mlflow|wandb (a list; "
        "tensorboard: false also drops TensorBoard)",
    )
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings, description="trackers: [mlflow]")
    wandb: WandbSettings = Field(default_factory=WandbSettings, description="trackers: [wandb]")
    checkpoints: bool = Field(True, description="write checkpoints (resuming from one works either way)")
    checkpoint_dir: str | None = Field(None, description="where checkpoints go; None: out_dir/checkpoints")
    checkpoint_every: int | None = Field(
        None, ge=1, description="also save every N optimizer steps (always at each epoch end and at the end)"
    )
    keep_last: int | None = Field(3, ge=1, description="keep the newest N checkpoints; None: keep all")
    keep_best: str | None = Field(
        None, pattern=r"^[\w.]+:(min|max)$", description="also keep the best by a metric, e.g. val_loss:min"
    )
    force_resume: bool = Field(False, description="resume even when batch size, seed, ... differ")
    strategy: Strategy = Field(
        "auto",
        description="torch: single|ddp|fsdp2|dp, tensorflow: single|mirrored|multiworker; auto: ddp "
        "(torch) or multiworker (tensorflow, TF_CONFIG set) when launched as several processes, else single",
    )
    collective_timeout_s: float = Field(
        60.0, gt=0, description="seconds a collective may wait for the other ranks before every rank stops"
    )
    ddp_bucket_cap_mb: float = Field(25.0, gt=0, description="ddp: gradient bucket size (MB) per all-reduce")
    ddp_static_graph: bool = Field(False, description="ddp: the set of used parameters never changes")
    ddp_gradient_as_bucket_view: bool = Field(
        True, description="ddp: gradients are views into the all-reduce buckets (saves a copy)"
    )
    find_unused_parameters: bool = Field(
        False, description="ddp: search for parameters without a gradient each step (slower; only if needed)"
    )
    fsdp_shard_modules: list[str] = Field(
        default_factory=list,
        description="fsdp2: module class names sharded as units; empty: every module in an nn.ModuleList",
    )
    num_workers: int | None = Field(
        None,
        ge=0,
        description="DataLoader workers for a Dataset the Trainer wraps; None: 0 on a CPU, "
        "min(8, cores - 1) on CUDA (tensors take the fast path and need none)",
    )
    pin_memory: bool | None = Field(None, description="pinned host batches; None: on CUDA only")
    prefetch_factor: int | None = Field(
        None,
        ge=1,
        description="batches loaded ahead: torch: by each DataLoader worker (None: 2 when there are "
        "workers); tensorflow: by the tf.data pipeline (None: tf.data.AUTOTUNE)",
    )
    resume_data: Literal["replay", "skip"] = Field(
        "replay",
        description="torch: how a resumed run reaches its batch in a DataLoader given: replay (load the "
        "consumed batches again: exact, workers' random augmentations too) or skip (take their indices "
        "from the sampler, loading none; a map-style dataset only); tensors and a Dataset resume by index",
    )
    data_cache: bool | Literal["auto"] = Field(
        "auto",
        description="tensorflow: keep the tf.data source's elements in memory after the first pass; auto: "
        "when the arrays take at most 1 GiB",
    )
    fsdp_reshard_after_forward: bool = Field(
        True, description="fsdp2: free gathered parameters after forward (less memory, one more all-gather)"
    )
    engine: str = Field(
        engines.DEFAULT,
        description="the framework that trains: an engine's name (gpulab.engine_registry: "
        + "|".join(engines.names())
        + ", or one registered there)",
    )

    _check_engine = field_validator("engine")(classmethod(lambda cls, v: _validate_engine(v)))
    _check_device = field_validator("device")(classmethod(lambda cls, v: _validate_device(v)))
    _check_batch_size = field_validator("batch_size", mode="before")(
        classmethod(lambda cls, v: _validate_batch_size(v))
    )
    _check_memory_limit = field_validator("memory_limit", mode="before")(
        classmethod(lambda cls, v: _validate_memory_limit(v))
    )
    _check_trackers = field_validator("trackers", mode="before")(classmethod(lambda cls, v: _tracker_list(v)))
    # One class name is a list of one (`--set activation_checkpointing=Block`, as users write it).
    _one_name_is_a_list = field_validator(
        "activation_checkpointing", "fsdp_shard_modules", "model_inputs", mode="before"
    )(classmethod(lambda cls, v: [v] if isinstance(v, str) else v))


class RunConfig(TrainerSettings):
    """A whole ``gpulab train`` run: the recipe, its own options, and the trainer settings."""

    recipe: str = Field(..., description="mlp|digits|chargpt, or your own package.module:function")
    options: dict[str, Any] = Field(default_factory=dict, description="the recipe's own settings")
    resume: str | None = Field(
        None,
        description="checkpoint directory, 'latest' under out_dir/checkpoints, or 'auto' (latest if a "
        "checkpoint exists, else start; the default under gpulab launch/torchrun, so a restart continues)",
    )
    overwrite: bool = Field(
        False,
        description="start afresh in an out_dir that holds a previous run: remove its summary, metrics, "
        "TensorBoard logs and checkpoints first (without it, or resume, such a directory is refused)",
    )
    mfu: bool = Field(True, description="log MFU and write it to summary.json (FLOPs counted at start)")

    @field_validator("options", mode="before")
    @classmethod
    def _options_are_a_mapping(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise ValueError(
                "it holds the recipe's own settings, a mapping (e.g. --set options.lr=0.01, or options: "
                "{lr: 0.01} in --config)"
            )
        return {} if value is None else value

    def trainer_settings(self, unset: frozenset[str] = frozenset()) -> TrainerSettings:
        """The trainer's part of these settings as validated here, not validated again (a run's settings
        are validated once, by its engine's ``resolve``): what the user or the recipe set stays set;
        ``unset``: settings handed over at their default, as if never given."""
        fields = TrainerSettings.model_fields
        values = {
            k: f.get_default(call_default_factory=True) if k in unset else copy.deepcopy(getattr(self, k))
            for k, f in fields.items()
        }
        given = (self.model_fields_set & fields.keys()) - unset
        out = TrainerSettings.model_construct(_fields_set=given, **values)
        out._engine_checked = self._engine_checked
        return out
