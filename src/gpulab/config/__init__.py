"""gpulab's settings, one concern a module: ``schema`` (the pydantic models, their choices and checks),
``validate`` (a dict validated into them, one line per mistake; a setting the engine lacks refused),
``yaml_files`` and ``yaml_bounds`` (a YAML config file read, and bounded before it is), ``layering`` (a
CLI run's YAML < flags < ``--set``, deep-merged). The names below are re-exported here, where scripts and
the guide (``gpulab.config.TrainerSettings``) find them.
"""

from __future__ import annotations

from gpulab.config.layering import layer_settings, merge, parse_overrides, with_defaults
from gpulab.config.schema import (
    TRACKERS,
    MlflowSettings,
    RunConfig,
    Settings,
    TableNames,
    TrainerSettings,
    WandbSettings,
)
from gpulab.config.validate import (
    MAX_LINES,
    MAX_UNKNOWN,
    assign,
    check_engine,
    engine_checked,
    parse_config,
    trainer_settings_of,
    validate_run,
    validated,
)
from gpulab.config.yaml_files import CONFIG_LIMIT, load_yaml

__all__ = [
    "CONFIG_LIMIT",
    "MAX_LINES",
    "MAX_UNKNOWN",
    "TRACKERS",
    "MlflowSettings",
    "RunConfig",
    "Settings",
    "TableNames",
    "TrainerSettings",
    "WandbSettings",
    "assign",
    "check_engine",
    "engine_checked",
    "layer_settings",
    "load_yaml",
    "merge",
    "parse_config",
    "parse_overrides",
    "trainer_settings_of",
    "validate_run",
    "validated",
    "with_defaults",
]
