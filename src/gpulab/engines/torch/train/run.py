"""A whole torch run from a configuration: recipe + settings -> Trainer -> summary.json.

The run's story is ``gpulab.core.run`` (every engine's); here: the settings resolved, this process's rank
under a launcher, the Trainer, the environment. Shared by ``gpulab train`` and by scripts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from gpulab.config.layering import with_defaults
from gpulab.config.schema import RunConfig
from gpulab.config.validate import validated
from gpulab.core import run as core_run
from gpulab.core.callbacks import Callback
from gpulab.core.recipes.base import load_recipe
from gpulab.core.run import RunSteps
from gpulab.core.run import default_resume as default_resume  # where scripts found it
from gpulab.core.state import FitResult
from gpulab.core.summary import environment as core_environment
from gpulab.engines.torch.distributed.process_group import LaunchEnv
from gpulab.engines.torch.runtime.seed import seed_everything
from gpulab.engines.torch.train import NAME
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.hardware.devices import select_device


def resolve_config(user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
    """Build the recipe ``user`` names and lay its defaults under the settings: ``user`` validated
    already (a ``RunConfig``: ``gpulab train``'s) or a dict (a script's, a verb's), validated here once."""
    from gpulab.errors import ConfigError

    if not isinstance(user, RunConfig) and not user.get("recipe"):
        raise ConfigError(
            "no recipe given: name one (mlp|digits|chargpt|module:function) or set 'recipe' in --config"
        )
    # The settings first (a bad seed is a one-line error, not int()'s traceback); every mistake is told
    # at once, the recipe's (its name, its options: the recipe checks those) with the rest.
    mistakes: list[str] = []
    try:
        settings = validated(user)
    except ConfigError as exc:
        mistakes, settings = [str(exc)], None
    # Seed before the recipe builds its model, so initial weights follow --seed too.
    seed_everything(settings.seed if settings else 0)
    try:
        if settings is not None:
            recipe = load_recipe(settings.recipe, settings.options)
        else:  # options that are no mapping were told with the settings: the recipe's name checked alone
            options = user.get("options")
            recipe = load_recipe(user["recipe"], options if isinstance(options, dict) else None)
    except ConfigError as exc:
        if not mistakes:
            raise
        raise ConfigError("\n".join([*mistakes, str(exc)])) from None
    if settings is None:
        raise ConfigError(mistakes[0])
    config = with_defaults(settings, recipe.defaults)
    if config.engine != NAME:  # each verb asks gpulab.engine_registry for the engine; a direct call may not
        raise ConfigError(
            f"engine {config.engine!r} is not available on this command yet (train, launch, profile, bench, "
            "inspect, export and tune have it); this command runs the torch engine: remove the engine setting"
        )
    return config, recipe


class TorchRun(RunSteps):
    """The torch engine's part of ``gpulab.core.run.run``."""

    @staticmethod
    def resolve(user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
        config, recipe = resolve_config(user)
        # A device this machine lacks is the command's own mistake: told before what --out holds is.
        select_device(config.device)
        return config, recipe

    def rank(self) -> int:
        launch = LaunchEnv.from_env()
        return launch.rank if launch else 0

    def prepares(self, rank: int) -> bool:
        # A restarted attempt of a launched job continues in the directory its first attempt made.
        return rank == 0 and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0

    def trainer(self, config: RunConfig, callbacks: list[Callback]) -> Trainer:
        # batch_size stays unset where neither the user nor the recipe set it: a recipe's own DataLoader
        # keeps its batch size unless told otherwise (and then says that it does).
        trajectory = {"recipe": config.recipe, "options": config.options}
        return Trainer(trajectory=trajectory, callbacks=callbacks, settings=config.trainer_settings())

    def fit(self, trainer: Trainer, recipe: Any, resume: str | None) -> FitResult:
        return recipe.fit(trainer, resume=resume)

    def environment(self) -> dict[str, Any]:
        return environment()


def run(user: dict[str, Any] | RunConfig) -> tuple[RunConfig, FitResult, Path | None]:
    """Train as ``user`` says (``gpulab.core.run.run``); the output directory on rank 0, else None."""
    return core_run.run(TorchRun(), user)


def environment() -> dict[str, Any]:
    """The torch engine's environment for summary.json and profile/bench reports."""
    return core_environment(
        {"torch": torch.__version__}, torch.cuda.get_device_name() if torch.cuda.is_available() else None
    )
