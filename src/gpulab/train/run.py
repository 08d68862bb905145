"""A whole run from a configuration: recipe + settings -> Trainer -> summary.json.

Shared by ``gpulab train`` and by scripts; settings are layered recipe defaults < YAML < flags < --set.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

import gpulab
from gpulab.config import RunConfig, merge, parse_config
from gpulab.distributed.process_group import LaunchEnv
from gpulab.hardware.devices import cpu_model
from gpulab.runtime.seed import seed_everything
from gpulab.train.callbacks.preemption import StopOnSignal
from gpulab.train.preemption import SignalWatch, preempted_error
from gpulab.train.recipes.base import load_recipe
from gpulab.train.run_dir import check_output_dirs, claim, prepare
from gpulab.train.state import FitResult
from gpulab.train.trainer import Trainer

SUMMARY_FILE = "summary.json"


def resolve_config(user: dict[str, Any]) -> tuple[RunConfig, Any]:
    """Build the recipe named in ``user`` and validate the merged settings."""
    from gpulab.errors import ConfigError

    if not user.get("recipe"):
        raise ConfigError(
            "no recipe given: name one (mlp|digits|chargpt|module:function) or set 'recipe' in --config"
        )
    # Seed before the recipe builds its model, so initial weights follow --seed too.
    seed_everything(int(user.get("seed", 0)))
    recipe = load_recipe(user["recipe"], user.get("options"))
    config = parse_config(RunConfig, merge(recipe.defaults, user))
    if config.engine != "torch":  # run() sends tensorflow to its own engine before this; profile does not
        raise ConfigError(
            f"engine {config.engine!r} is not available on this command yet (train, launch, profile, bench, "
            "inspect, export and tune have it); this command runs the torch engine: remove the engine setting"
        )
    return config, recipe


def default_resume(user: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``resume: auto`` for a job under torchrun's elastic agent (``gpulab launch``) unless the user chose:
    a restarted attempt then continues from the failed one's last checkpoint instead of starting over."""
    environ = os.environ if environ is None else environ
    if user.get("resume") is None and "TORCHELASTIC_RUN_ID" in environ:
        return {**user, "resume": "auto"}
    return user


def run(user: dict[str, Any]) -> tuple[RunConfig, FitResult, Path | None]:
    """Train as ``user`` says; returns the output directory on rank 0 (which writes it), else None.

    Holds ``out``'s lock for the run (``run_dir.py``). While it trains, the first SIGTERM/SIGINT stops it at
    the next step with a checkpoint and raises ``Preempted`` (exit 128 + N from the CLI).
    """
    if user.get("engine") == "tensorflow":  # its own loop and recipes; TensorFlow imported only there
        from gpulab.engines.tensorflow.run import run as run_tensorflow

        return run_tensorflow(user)
    config, recipe = resolve_config(default_resume(user))
    out = Path(config.out_dir or f"runs/{config.recipe}")
    check_output_dirs(out, config.checkpoint_dir)
    launch = LaunchEnv.from_env()
    with claim(out, rank=launch.rank if launch else 0), SignalWatch() as signals:
        # A restarted attempt of a launched job continues in the directory its first attempt made.
        if (launch is None or launch.rank == 0) and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0:
            prepare(out, config.checkpoint_dir, config.resume, config.overwrite)
        settings = config.model_dump(exclude={"recipe", "options", "resume", "overwrite"})
        trainer = Trainer(
            trajectory={"recipe": config.recipe, "options": config.options},
            callbacks=[StopOnSignal(signals)],
            **settings,
        )
        result = recipe.fit(trainer, resume=config.resume)
        if "preempted" in result.extras:  # no summary: the run is not finished
            raise preempted_error(result.extras["preempted"], trainer.is_rank_zero)
        if not trainer.is_rank_zero:
            return config, result, None
        if "nothing_to_do" in result.extras:  # a finished run resumed: its summary stays as it was
            return config, result, out
        write_summary(out, config, result, recipe.info)
    return config, result, out


def write_summary(out: Path, config: RunConfig, result: FitResult, info: dict[str, Any]) -> Path:
    summary = {
        "recipe": config.recipe,
        "engine": config.engine,
        **result.to_json(),  # batch_size as resolved (batch_size: auto gives a number)
        "accumulate": config.accumulate,
        **info,
        "environment": environment(config.engine),
        "config": config.model_dump(),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / SUMMARY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(path)  # a reader never sees half a summary
    return path


def environment(engine: str = "torch") -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    versions = {"torch": torch.__version__}
    if engine == "tensorflow":
        import tensorflow as tf

        versions = {"tensorflow": tf.__version__, "keras": tf.keras.__version__}
    return {
        "gpulab": gpulab.__version__,
        **versions,
        "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name() if cuda else cpu_model(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
