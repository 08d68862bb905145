"""Validated settings (pydantic), free of any framework so that a second engine can share them.

Every model forbids unknown keys, and no number setting takes a boolean. ``parse_config`` turns pydantic's
report into one line per wrong setting that names the key, what was given, and the valid choices (for a
typo'd key, the closest valid ones first). YAML is read as UTF-8, and a key given twice is refused.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import core_schema

from gpulab import engine_registry as engines
from gpulab import precisions as precision_table
from gpulab.config_bounds import MAX_DEPTH, check_bounds
from gpulab.errors import ConfigError, choices


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
        return TrainerSettings.model_construct(_fields_set=given, **values)


S = TypeVar("S", bound=Settings)


def trainer_settings_of(settings: TrainerSettings | None, given: dict[str, Any]) -> TrainerSettings:
    """A trainer's settings: ``settings`` as validated already (``RunConfig.trainer_settings``: gpulab's
    verbs), or the keyword settings a user's script gave, validated here."""
    if settings is None:
        return parse_config(TrainerSettings, given)
    if given:
        raise ConfigError(f"give a trainer settings= or keyword settings ({', '.join(given)}), not both")
    return settings


def check_engine(settings: TrainerSettings) -> None:
    """Refuse, in one line, a setting the chosen engine does not have (it would be silently ignored): the
    engine object says what it lacks (``Engine.lacks``); the line names the engines that have it."""
    engine = engines.get(settings.engine)
    for name in sorted(settings.model_fields_set & set(engine.lacks)):
        value = getattr(settings, name)
        default = type(settings).model_fields[name].get_default(call_default_factory=True)
        lack = engine.lacks[name]
        if lack.allows(value, default):
            continue
        others = [
            n for n in engines.names() if n != engine.name and _takes(engines.get(n), name, value, default)
        ]
        instead = f", or use --engine {choices(others)}" if others else ""
        raise ConfigError(
            f"setting {name!r} = {value!r} is not available on engine {engine.name!r} "
            f"({lack.valid(default)}); remove it{instead}"
        )


def _takes(engine: engines.Engine, name: str, value: Any, default: Any) -> bool:
    return name not in engine.lacks or engine.lacks[name].allows(value, default)


def _closest(word: str, valid: list[str]) -> list[str]:
    near = difflib.get_close_matches(word, valid, n=3, cutoff=0.5)
    return near + [v for v in valid if v not in near]


def _lines(model: type[Settings], data: dict[str, Any], exc: ValidationError, prefix: str) -> list[str]:
    """One line per wrong setting, all of them (a file with three mistakes is fixed in one edit)."""
    errors, lines, told = exc.errors(), [], set()
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        depth = _field_depth(model, loc)
        # A union (bool | 'auto'): pydantic names each branch after the field (an unknown key in a nested
        # model, such as mlflow.experimnt, also ends past the fields, and is told as unknown below).
        if 0 < depth < len(loc) and err["type"] != "extra_forbidden":
            if tuple(loc[:depth]) in told:
                continue
            told.add(tuple(loc[:depth]))
            branches = [e for e in errors if [str(p) for p in e["loc"][:depth]] == loc[:depth]]
            key = prefix + ".".join(loc[:depth])
            shown = choices(list(dict.fromkeys(_union_choices(branches))))  # each item's branches alike
            lines.append(f"setting {key!r} = {err.get('input')!r} is invalid: valid choices: {shown}")
        else:
            lines.append(_one_line(model, data, err, loc, prefix))
    return lines


def _one_line(model: type[Settings], data: dict[str, Any], err: Any, loc: list[str], prefix: str) -> str:
    key = prefix + (".".join(loc) or "(root)")
    if err["type"] == "extra_forbidden":
        valid = _closest(loc[-1], list(_fields_at(model, loc[:-1])))
        return f"unknown setting {key!r}; valid settings: {choices(valid)}"
    given = err.get("input", data.get(loc[0]) if loc else None)
    field = _fields_at(model, loc[:-1]).get(loc[-1]) if loc else None
    expected = (err.get("ctx") or {}).get("expected")
    if expected:  # a Literal: list the choices in the project's a|b|c form
        msg = "valid choices: " + choices(re.findall(r"'([^']*)'", expected))
    else:
        msg = err["msg"].removeprefix("Value error, ")
    # Numeric bounds and string shapes read better with what the field means (its description's example).
    hint = (
        f" ({field.description})"
        if field is not None and field.description and err["type"] in _BOUNDS | _SHAPES
        else ""
    )
    return f"setting {key!r} = {given!r} is invalid: {msg}{hint}"


_BOUNDS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "int_parsing",
    "float_parsing",
}
# A pattern's regex (keep_best's '^[\w.]+:(min|max)$') or "a valid string" alone does not say what to write.
_SHAPES = {"string_pattern_mismatch", "string_type"}


def _field_depth(model: type[BaseModel], loc: list[str]) -> int:
    """How many leading parts of an error's location name fields (the rest name union branches)."""
    return next((i for i, part in enumerate(loc) if part not in _fields_at(model, loc[:i])), len(loc))


def _union_choices(errors: list[dict[str, Any]]) -> list[str]:
    """What each branch of a union takes, as the user writes it: true/false, the literals, or the message."""
    out: list[str] = []
    for e in errors:
        expected = (e.get("ctx") or {}).get("expected")
        if e["type"].startswith("bool_"):
            out += ["true", "false"]
        elif expected:
            out += re.findall(r"'([^']*)'", expected)
        else:
            out.append(e["msg"])
    return out


def _fields_at(model: type[BaseModel], path: list[str]) -> dict:
    fields = dict(model.model_fields)
    for part in path:
        sub = fields.get(part)
        ann = getattr(sub, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return {}
        fields = dict(ann.model_fields)
    return fields


MAX_UNKNOWN = 200  # more unknown keys than gpulab has settings: the wrong file, refused in one line
MAX_LINES = 20  # mistakes told one line each, then how many more


def parse_config(model: type[S], data: dict[str, Any] | None, prefix: str = "") -> S:
    """Validate ``data`` against ``model``; each problem becomes one line of a ``ConfigError``.

    ``prefix`` names where ``data`` sits in the whole config (``"options."`` for a recipe's settings).
    """
    data = dict(data or {})
    unknown = [str(k)[:40] for k in data if k not in model.model_fields]
    if len(unknown) > MAX_UNKNOWN:  # not a gpulab config at all: one line, before pydantic walks it
        raise ConfigError(
            f"{len(unknown):,} unknown settings{' under ' + prefix.rstrip('.') if prefix else ''} "
            f"({', '.join(map(repr, unknown[:3]))}, ...): is this a gpulab config? valid settings: "
            f"{choices(list(model.model_fields))}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = _lines(model, data, exc, prefix)
        more = [f"and {len(lines) - MAX_LINES} more mistakes"] if len(lines) > MAX_LINES + 1 else []
        raise ConfigError("\n".join(lines[: MAX_LINES if more else None] + more)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, noting a key given twice in one mapping (PyYAML keeps the last silently, so
    the first value a user wrote would be ignored without a word)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: overriding it is the point
                continue
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float)):  # a list or mapping as a key: PyYAML refuses it
                continue
            if key in first:
                self.duplicates.append(f"key {key!r} is given twice, at line {first[key]} and line {line}")
            first.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)


def _safe_load(text: str, where: str) -> tuple[Any, list[str]]:
    """``yaml.safe_load`` with duplicate keys collected (each described with both line numbers), after
    ``config_bounds`` has refused what would expand, nest or loop past any real config (``where``: how the
    one line names the text)."""
    check_bounds(text, where)
    loader = _UniqueKeyLoader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    finally:
        loader.dispose()


CONFIG_LIMIT = 4 << 20  # bytes: far above any run's settings, far below a wrong file's


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with one-line errors for a missing file, bytes that are not UTF-8 text, bad
    YAML and keys given twice (one line each)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a folder; give the YAML file of the run's settings")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if (size := p.stat().st_size) > CONFIG_LIMIT:  # a 16 GiB file was read whole into memory
        raise ConfigError(
            f"config file {str(p)!r} is {size:,} bytes; a run's settings take a few KB (at most "
            f"{CONFIG_LIMIT:,} bytes): give the YAML file of the run's settings"
        )
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {str(p)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
            "save it as UTF-8"
        ) from None
    try:
        data, duplicates = _safe_load(text, f"config file {str(p)!r}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        if "'\\t'" in str(getattr(exc, "problem", "")):  # PyYAML says "found character '\t'"
            where += ": a tab, which YAML does not take for indenting; indent with spaces"
        raise ConfigError(f"config file {str(p)!r} is not valid YAML{where}") from None
    if duplicates:
        raise ConfigError("\n".join(f"config file {str(p)!r}: {d}; keep one" for d in duplicates))
    if data is None:  # an unsaved buffer or the wrong file: training on defaults would hide it
        raise ConfigError(
            f"config file {str(p)!r} is empty (it sets nothing); write settings in it, or leave out "
            "--config to train with the recipe's defaults"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(p)!r} must hold a mapping of settings, not {type(data).__name__}"
        )
    return data


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["a.b=3", "x=fp16"]`` -> nested dict, each value parsed as YAML (so numbers and bools work)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r} is not key=value (for example --set batch_size=64)")
        if key.count(".") >= MAX_DEPTH:
            raise ConfigError(f"--set {pair[:60]!r}...: the key nests deeper than {MAX_DEPTH} levels")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _override_value(pair, raw) if raw else ""
    return out


def _override_value(pair: str, raw: str) -> Any:
    try:
        value, duplicates = _safe_load(raw, f"--set {pair!r}")
    except yaml.YAMLError:
        raise ConfigError(f"--set {pair!r}: the value is not valid YAML") from None
    if duplicates:
        raise ConfigError(f"--set {pair!r}: {duplicates[0]}; keep one")
    return value


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base``."""
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def layer_settings(
    config_file: str | Path | None, flags: dict[str, Any], overrides: list[str]
) -> dict[str, Any]:
    """The user's settings for a CLI run: YAML file < flags that were given (not None) < ``--set`` pairs."""
    user = load_yaml(config_file) if config_file else {}
    given = {k: v for k, v in flags.items() if v is not None}
    return merge(merge(user, given), parse_overrides(overrides))
