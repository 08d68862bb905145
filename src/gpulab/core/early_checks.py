"""A user's mistakes in ``gpulab train``'s settings, a built-in recipe's options and the checkpoint
``--resume`` names, told before the engine's framework is imported (torch took 2-160 s to import on a
2-core machine, at load 0 to 20, before `--resume runs/nope` was said not to exist).

The run's settings are validated here, once (``validate_run``), and the engine takes the object as it is;
only what needs the framework (the recipe built, its defaults laid under) is the engine's ``resolve``.
Every mistake found is told at once, as there (the settings', then the recipe options').
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulab.config.schema import RunConfig
from gpulab.config.validate import parse_config, validate_run
from gpulab.engine_registry import builds_recipe_data
from gpulab.errors import ConfigError, choices
from gpulab.recipe_data import OPTIONS

# --resume values that name no path: the run's own latest checkpoint (core/run_dir.py decides)
_NO_PATH = (None, "latest", "auto")


def check_before_framework(user: dict[str, Any]) -> RunConfig | None:
    """The run's settings validated (``validate_run``); None where ``user`` names no recipe (the engine's
    line names its recipes). Raise a ConfigError (one line a mistake) or a CheckpointError for what
    ``user`` gets wrong."""
    if not user.get("recipe"):
        return None
    mistakes: list[str] = []
    config = None
    try:
        config = validate_run(user)
    except ConfigError as exc:
        mistakes.append(str(exc))
    if builds_recipe_data(user.get("engine")):  # the registry's word; no engine imported
        mistakes += _recipe_mistakes(str(user["recipe"]), user.get("options"))
    if mistakes:
        raise ConfigError("\n".join(mistakes))
    resume = user.get("resume")
    if resume not in _NO_PATH:
        _check_resume_path(Path(str(resume)))
    return config


def _check_resume_path(path: Path) -> None:
    """The checkpoint ``--resume`` names exists and is one (or a root holding one): a file or an empty
    folder once got as far as creating the run's folder before it was refused."""
    from gpulab.checkpoint.read import check_names_checkpoint

    check_names_checkpoint(path, "give a step-* checkpoint folder, a run's checkpoints folder, or latest")


def _recipe_mistakes(name: str, options: Any) -> list[str]:
    """A built-in recipe's options checked (as it will check them), or a name that is none of them."""
    if ":" in name:
        return []  # the user's module:function: imported (with its framework) only to build it
    if name not in OPTIONS:
        return [f"unknown recipe {name!r}; valid: {choices(OPTIONS)} or your own module:function"]
    if not isinstance(options, dict):
        return []  # the recipe loader's line says what 'options' holds
    try:
        parse_config(OPTIONS[name], options, prefix="options.")
    except ConfigError as exc:
        return [str(exc)]
    return []
