"""The torch engine: everything that imports torch as it loads lives in this folder.

- ``train/``: the ``Trainer`` and its step helpers, its checkpoints, ``gpulab train``'s run
- ``runtime/``: ``Runtime`` = device x precision x strategy (``strategies/``), compile, CUDA graphs, memory
- ``data/``: loaders, the tensor fast path, the prefetcher, transfers
- ``recipes/``: the built-in recipes (mlp, digits, chargpt)
- ``checkpoint/``: the torch checkpoint format, its state's checks and RNG state, FSDP2's shards, on the
  shared ``gpulab.checkpoint``
- ``distributed/``: process groups and the collective watchdog
- ``measure/``: a torch step's FLOPs and its timers
- each verb's torch part: profile.py, inspect.py (+ inspect_model.py), export.py (with rebuild.py and
  formats/), bench/ (its suites; run.py runs them), tune.py (with tune_space.py)

This file imports no torch: the engine object's methods import what they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpulab.engine_registry import Lack
from gpulab.engines.torch.diagnosis_advice import ADVICE
from gpulab.engines.torch.state.layouts import LAYOUTS as CHECKPOINT_LAYOUTS
from gpulab.engines.torch.train import NAME


class TorchExport:
    """``gpulab export`` of a torch run (``engine_capabilities.Export``)."""

    formats = {f: f"{__name__}.formats.{f}" for f in ("exported", "onnx", "torchscript", "aoti")}
    refusal = "exports a torch model"  # a torch format asked of another engine's run
    precisions = None  # any of export's dtypes (the model is cast)
    model = "the torch model"

    def run(self, path: Path, module: Any, fixed: int | None, **request: Any) -> Any:
        from gpulab.engines.torch.export import export_torch

        return export_torch(path, module, fixed, **request)


class TorchCheckpoints:
    """Its checkpoints: their layouts (``engine_capabilities.Checkpoints``)."""

    layouts = CHECKPOINT_LAYOUTS


class TorchCheckpointInspect:
    def read(self, directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
        from gpulab.engines.torch.state.api import read_torch_files

        read_torch_files(directory, meta, report)


class TorchCheckpointExport:
    def run(self, directory: Path, out: Path) -> Path:
        from gpulab.engines.torch.state.api import copy_weights

        return copy_weights(directory, out)


class TorchInspect:
    flop_counter = "the FLOP counter's figure"
    cast_note = ("(autocast)", "autocast runs")

    def run(self, user: dict[str, Any]) -> Any:
        from gpulab.engines.torch.inspect import inspect_torch

        return inspect_torch(user)


class TorchProfile:
    view = "phases"
    compiler = "torch.compile"

    def run(self, user: dict[str, Any], out_dir: Path, options: Any) -> Any:
        from gpulab.engines.torch.profile import profile_recipe

        return profile_recipe(user, out_dir, options)


class TorchTune:
    compile_failure = "torch.compile fell back to eager"

    def tuner(self) -> Any:
        from gpulab.engines.torch.tune import TorchTuner

        return TorchTuner()


class TorchBench:
    in_process = True
    prefix = ""
    compile = ("eager", "default")
    speedup = ("speedup_vs_eager", "torch.compile over eager")

    def check(self) -> None:
        return None  # bench's process imports torch itself: a missing torch is told as for any verb

    def environment(self) -> dict[str, Any]:
        from gpulab.engines.torch.bench.run import bench_environment

        return bench_environment()

    def run(self, names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
        from gpulab.engines.torch.bench.run import run_torch_suites

        run_torch_suites(names, ctx, config, doc, out, log)


class TorchLaunch:
    options = (
        ("--rdzv-endpoint", "rdzv_endpoint", None),
        ("--rdzv-id", "rdzv_id", None),
        ("--local-addr", "local_addr", None),
        ("--max-restarts", "max_restarts", None),
    )
    templates = ("slurm", "k8s")  # a PyTorchJob runs torchrun's rendezvous
    by_torchrun = True

    def run(self, spec: Any, options: dict[str, Any]) -> None:
        from gpulab.distributed.launch import launch

        launch(spec)


class TorchInfer:
    def recipe(self, name: str, options: Mapping[str, Any]) -> Any:
        from gpulab.core.recipes.base import load_recipe

        return load_recipe(name, dict(options))

    def inputs(self, recipe: Any, name: str, names: list[str] | None) -> tuple[tuple, Any]:
        from gpulab.artifact import arrays
        from gpulab.artifact import data as export_data
        from gpulab.engines.torch.runtime.signature import Signature

        if names is None:
            inputs, target = export_data.from_recipe(recipe.val_data, name)
        else:
            # the batch's keys (or forward's parameters) are the artifact's input names (runtime/signature.py)
            data = export_data.named_from_recipe(recipe.val_data, name, Signature(recipe.model, names))
            inputs, target = data.inputs, data.target
        numpy = lambda t: t.numpy(force=True)  # noqa: E731 (the seam carries NumPy: infer makes its tensors)
        return tuple(map(numpy, inputs)), arrays.tree_map(numpy, target) if target is not None else None


class TorchEngine:
    name = NAME
    framework = "PyTorch"
    framework_module = "torch"
    extra = "torch"
    # the settings it lacks: the strategies it has not (precisions.STRATEGIES), the tf.data cache
    lacks = {"strategy": Lack(("auto", "single", "ddp", "fsdp2", "dp")), "data_cache": Lack()}
    checkpoints = TorchCheckpoints()
    checkpoint_inspect = TorchCheckpointInspect()
    checkpoint_export = TorchCheckpointExport()
    export = TorchExport()
    diagnosis = ADVICE  # the diagnosis's fixes in its words
    inspect = TorchInspect()
    profile = TorchProfile()
    tune = TorchTune()
    bench = TorchBench()
    launch = TorchLaunch()
    infer = TorchInfer()
    # no doctor: the machine's checks (hardware/checks.py) are torch's, run by its probe

    def resolve(self, user: Any) -> tuple[Any, Any]:
        from gpulab.engines.torch.train.run import resolve_config

        return resolve_config(user)

    def run(self, user: Any) -> tuple[Any, Any, Path | None]:
        from gpulab.engines.torch.train.run import run

        return run(user)

    def environment(self) -> dict[str, Any]:
        from gpulab.engines.torch.train.run import environment

        return environment()


ENGINE = TorchEngine()
