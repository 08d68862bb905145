"""The TensorFlow engine's ``Engine`` (gpulab.engine_registry): what each verb asks of it, TensorFlow
imported only inside the methods that run it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpulab.engine_registry import Lack
from gpulab.engines.tensorflow.bench import TF_PREFIX
from gpulab.engines.tensorflow.checkpoint_layout import LAYOUTS as CHECKPOINT_LAYOUTS
from gpulab.engines.tensorflow.diagnosis_advice import ADVICE

# The settings it lacks (torch's): refused in one line (config.check_engine) rather than ignored.
_DEVICES = ("auto", "cpu", "cuda", *(f"cuda:{i}" for i in range(64)))
_TORCH_ONLY = (
    "activation_checkpointing",
    "channels_last",
    "micro_batch",
    "compile_mode",
    "compile_backend",
    "compile_check",
    "cuda_graph",
    "keep_best",
    "collective_timeout_s",
    "ddp_bucket_cap_mb",
    "ddp_static_graph",
    "ddp_gradient_as_bucket_view",
    "find_unused_parameters",
    "fsdp_shard_modules",
    "fsdp_reshard_after_forward",
    "num_workers",
    "pin_memory",
    "fuse_optimizer",
    "attention",
    "model_inputs",
    "model_output",
)


class TensorFlowExport:
    """``gpulab export`` of a TensorFlow run (``engine_capabilities.Export``)."""

    formats = {f: f"gpulab.engines.tensorflow.formats.{f}" for f in ("savedmodel", "tflite")}
    refusal = "needs a TensorFlow-engine run"  # a TensorFlow format asked of another engine's run
    precisions = ("fp32",)
    model = "the float32 Keras model"

    def run(self, path: Path, module: Any, fixed: int | None, **request: Any) -> Any:
        from gpulab.artifact.sidecar import EXAMPLE_BATCH, PARITY_BATCH, SIDECAR
        from gpulab.engines.tensorflow.export import export_tf

        batch = {"example": EXAMPLE_BATCH, "parity": PARITY_BATCH}
        out, input_file, trust = request["out"], request["input_file"], request["trust"]
        return export_tf(path, module, fixed, out, input_file, SIDECAR, batch, trust)


class TensorFlowCheckpoints:
    """Its checkpoints: their layouts (``engine_capabilities.Checkpoints``)."""

    layouts = CHECKPOINT_LAYOUTS


class TensorFlowCheckpointInspect:
    def read(self, directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
        from gpulab.checkpoint.inspect import recipe_in_meta

        recipe_in_meta(directory, meta, report)
        # The MANIFEST vouched for the bytes; TensorFlow reads them as its resume does (sizes, crc32c).
        # Without TensorFlow (inspecting on another machine) they are said to be unread.
        from gpulab.engines.tensorflow.checkpoint_files import unreadable
        from gpulab.errors import ConfigError

        try:
            why = unreadable(directory)
        except ConfigError:  # TensorFlow is not installed
            report["notes"].append("ckpt.index/ckpt.data not read: TensorFlow is not installed")
            return
        if why is not None:
            report["problems"].append(why)


class TensorFlowCheckpointExport:
    """Its weights are the run's model.weights.h5: ``checkpoint export`` says so (torch's copies a file)."""

    def run(self, directory: Path, out: Path) -> Path:
        from gpulab.errors import CheckpointError

        raise CheckpointError(
            f"{directory} was written by the TensorFlow engine: its weights are the run's model.weights.h5 "
            "(checkpoint export copies a torch checkpoint's model.safetensors)"
        )


class TensorFlowInspect:
    flop_counter = "TensorFlow's graph profiler's count"
    cast_note = ("(layer dtype policy)", "that run")

    def run(self, user: dict[str, Any]) -> Any:
        from gpulab.engines.tensorflow.inspect import inspect_tf

        return inspect_tf(user)


class TensorFlowProfile:
    view = "steps"
    compiler = "XLA"

    def run(self, user: dict[str, Any], out_dir: Path, options: Any) -> Any:
        from gpulab.engines.tensorflow.profile import profile_tf

        return profile_tf(user, out_dir, options)


class TensorFlowTune:
    compile_failure = "XLA could not compile the step"

    def tuner(self) -> Any:
        from gpulab.engines.tensorflow.tune import TensorFlowTuner

        return TensorFlowTuner()


class TensorFlowBench:
    in_process = False  # a worker process of its own, which picks the device as TensorFlow sees it
    prefix = TF_PREFIX
    compile = ("graph", "xla")
    speedup = ("speedup_vs_graph", "XLA over tf.function")

    def check(self) -> None:
        from gpulab.engines.tensorflow.bench.launch import require_tensorflow_installed

        require_tensorflow_installed()

    def environment(self) -> dict[str, Any]:
        return {}  # its worker reports TensorFlow's versions and devices (in_process is False)

    def run(self, names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
        from gpulab.engines.tensorflow.bench.launch import run_tensorflow_side

        run_tensorflow_side(names, ctx, config, doc, out, log)


class TensorFlowDoctor:
    def checks(self, facts: Any) -> list[Any]:
        from gpulab.engines.tensorflow.doctor import CHECKS

        return [c for c in (check(facts) for check in CHECKS) if c is not None]


class TensorFlowLaunch:
    options = (("--hosts", "hosts", None), ("--base-port", "base_port", None))
    templates = ("slurm",)  # each node's launcher reads SLURM's variables; no k8s operator for it
    by_torchrun = False

    def run(self, spec: Any, options: dict[str, Any]) -> None:
        from gpulab.engines.tensorflow.launch import launch_tf
        from gpulab.engines.tensorflow.launch_config import DEFAULT_TF_PORT

        port = options.get("base_port")
        launch_tf(spec, options.get("hosts"), DEFAULT_TF_PORT if port is None else port)


class TensorFlowInfer:
    def recipe(self, name: str, options: Mapping[str, Any]) -> Any:
        from gpulab.engines.tensorflow.export import (
            keras_recipe,  # its data in TensorFlow's layout (NHWC images)
        )

        return keras_recipe(name, dict(options))

    def inputs(self, recipe: Any, name: str, names: list[str] | None) -> tuple[tuple, Any]:
        from gpulab.artifact import arrays
        from gpulab.errors import DataError

        data = arrays.as_arrays(recipe.val_data)  # read once: a generator is consumed
        if not (isinstance(data, tuple) and len(data) >= 2):
            raise DataError(
                f"recipe {name!r} has no validation tensors (inputs..., target) to check the export on; "
                "give --input FILE.npz"
            )
        several = len(data) == 2 and isinstance(data[1], Mapping)  # a target per output
        # One array, whatever its artifact calls it ("input": the name export.json gives a lone array)
        if names is None or (len(names) == 1 and not isinstance(data[0], (Mapping, tuple, list))):
            return arrays.one_input(data[:1] if several else data[:-1], f"recipe {name!r}"), data[-1]
        return arrays.by_names(data, names, name)  # (inputs, target), by the names


class TensorFlowEngine:
    name = "tensorflow"
    framework = "TensorFlow"
    framework_module = "tensorflow"
    extra = "tensorflow"
    lacks = {
        "strategy": Lack(("auto", "single", "mirrored", "multiworker")),
        "device": Lack(_DEVICES, said="valid there: auto|cpu|cuda|cuda:N"),
        "batch_size": Lack(refuses=("auto",), said="give a number"),  # no batch search
        "mfu": Lack((False,)),
        **dict.fromkeys(_TORCH_ONLY, Lack()),
    }
    checkpoints = TensorFlowCheckpoints()
    checkpoint_inspect = TensorFlowCheckpointInspect()
    checkpoint_export = TensorFlowCheckpointExport()
    export = TensorFlowExport()
    diagnosis = ADVICE  # the diagnosis's fixes in its words
    inspect = TensorFlowInspect()
    profile = TensorFlowProfile()
    tune = TensorFlowTune()
    bench = TensorFlowBench()
    launch = TensorFlowLaunch()
    infer = TensorFlowInfer()
    doctor = TensorFlowDoctor()

    def resolve(self, user: Any) -> tuple[Any, Any]:
        from gpulab.engines.tensorflow.run import resolve_tf_config

        return resolve_tf_config(user)

    def run(self, user: Any) -> tuple[Any, Any, Path | None]:
        from gpulab.engines.tensorflow.run import run

        return run(user)

    def environment(self) -> dict[str, Any]:
        from gpulab.engines.tensorflow.run import environment

        return environment()


ENGINE = TensorFlowEngine()
