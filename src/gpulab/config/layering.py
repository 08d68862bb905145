"""A CLI run's settings layered: the YAML file < the flags given < ``--set key=value`` pairs (each value
read as YAML, so numbers and booleans work), deep-merged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpulab.config.schema import RunConfig
from gpulab.config.validate import assign, check_engine
from gpulab.config.yaml_bounds import MAX_DEPTH
from gpulab.config.yaml_files import load_yaml, safe_load
from gpulab.errors import ConfigError


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
        value, duplicates = safe_load(raw, f"--set {pair!r}")
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


def with_defaults(settings: RunConfig, defaults: dict[str, Any]) -> RunConfig:
    """A copy of ``settings`` (validated already, the user's) over a layer below them (a recipe's
    ``defaults``, a resumed run's recorded settings), layered as ``merge(defaults, user)`` would: what the
    user set wins, a mapping merged key by key. Only the defaults taken are validated (each as the setting
    it names) and checked against the engine; the user's settings are not validated again."""
    taken: dict[str, Any] = {}
    for key, value in defaults.items():
        if key in settings.model_fields_set:
            mine = getattr(settings, key, None)
            mine = mine.model_dump(exclude_unset=True) if isinstance(mine, BaseModel) else mine
            if not (isinstance(value, dict) and isinstance(mine, dict)):
                continue  # the user's value, whole
            value = merge(value, mine)
        taken[key] = value
    out = settings.model_copy(deep=True)
    assign(out, taken)
    check_engine(out, only=taken)
    return out
