"""A whole run from a configuration: recipe + settings -> Trainer -> summary.json.

Shared by ``gpulab train`` and by scripts; settings are layered recipe defaults < YAML < flags < --set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gpulab.config import RunConfig, merge, parse_config
from gpulab.core.callbacks.preemption import StopOnSignal
from gpulab.core.callbacks.trackers import attach_files
from gpulab.core.preemption import SignalWatch, preempted_error
from gpulab.core.recipes.base import load_recipe
from gpulab.core.recorded import with_recorded_settings
from gpulab.core.run_dir import check_output_dirs, checkpoint_root, claim, prepare
from gpulab.core.state import FitResult
from gpulab.core.summary import environment as core_environment
from gpulab.core.summary import run_files, write_summary
from gpulab.engines.torch.distributed.process_group import LaunchEnv
from gpulab.engines.torch.runtime.seed import seed_everything
from gpulab.engines.torch.train import NAME
from gpulab.engines.torch.train.trainer import Trainer


def resolve_config(user: dict[str, Any]) -> tuple[RunConfig, Any]:
    """Build the recipe named in ``user`` and validate the merged settings."""
    from gpulab.errors import ConfigError

    if not user.get("recipe"):
        raise ConfigError(
            "no recipe given: name one (mlp|digits|chargpt|module:function) or set 'recipe' in --config"
        )
    # The user's own settings first (a bad seed is a one-line error, not int()'s traceback); every
    # mistake is told at once, the recipe's (its name, its options: the recipe checks those) with the rest.
    mistakes: list[str] = []
    try:
        seed = parse_config(RunConfig, {k: v for k, v in user.items() if k != "options"}).seed
    except ConfigError as exc:
        mistakes, seed = [str(exc)], 0
    # Seed before the recipe builds its model, so initial weights follow --seed too.
    seed_everything(seed)
    try:
        recipe = load_recipe(user["recipe"], user.get("options"))
    except ConfigError as exc:
        if not mistakes:
            raise
        raise ConfigError("\n".join([*mistakes, str(exc)])) from None
    if mistakes:
        raise ConfigError(mistakes[0])
    config = parse_config(RunConfig, merge(recipe.defaults, user))
    if config.engine != NAME:  # each verb asks gpulab.engines for the engine; a direct call may not
        raise ConfigError(
            f"engine {config.engine!r} is not available on this command yet (train, launch, profile, bench, "
            "inspect, export and tune have it); this command runs the torch engine: remove the engine setting"
        )
    return config, recipe


def default_resume(user: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``resume: auto`` for a job under torchrun's elastic agent (``gpulab launch``), or a SLURM job's
    requeued attempt (``SLURM_RESTART_COUNT``), unless the user chose: a restarted attempt then continues
    from the last one's last checkpoint instead of starting over."""
    environ = os.environ if environ is None else environ
    requeued = environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0")
    if user.get("resume") is None and ("TORCHELASTIC_RUN_ID" in environ or requeued):
        return {**user, "resume": "auto"}
    return user


def run(user: dict[str, Any]) -> tuple[RunConfig, FitResult, Path | None]:
    """Train as ``user`` says; returns the output directory on rank 0 (which writes it), else None.

    Holds ``out``'s lock for the run (``run_dir.py``). While it trains, the first SIGTERM/SIGINT stops it at
    the next step with a checkpoint and raises ``Preempted`` (exit 128 + N from the CLI).
    """
    config, recipe = resolve_config(with_recorded_settings(default_resume(user)))
    out = Path(config.out_dir or f"runs/{config.recipe}")
    check_output_dirs(out, config.checkpoint_dir)
    launch = LaunchEnv.from_env()
    started = checkpoint_root(out, config.checkpoint_dir).is_dir()  # before the lock makes it
    with claim(out, launch.rank if launch else 0, config.checkpoint_dir), SignalWatch() as signals:
        # A restarted attempt of a launched job continues in the directory its first attempt made.
        if (launch is None or launch.rank == 0) and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0:
            prepare(out, config.checkpoint_dir, config.resume, config.overwrite, started)
        # batch_size only where the user or the recipe set it: a recipe's own DataLoader keeps its batch
        # size unless told otherwise (and then says that it does).
        unset = set() if "batch_size" in config.model_fields_set else {"batch_size"}
        settings = config.model_dump(exclude={"recipe", "options", "resume", "overwrite", *unset})
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
        write_summary(out, config, result, recipe.info, environment())
        attach_files(trainer.callbacks, run_files(out))
    return config, result, out


def environment() -> dict[str, Any]:
    """The torch engine's environment for summary.json and profile/bench reports."""
    return core_environment(
        {"torch": torch.__version__}, torch.cuda.get_device_name() if torch.cuda.is_available() else None
    )
