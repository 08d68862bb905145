"""Settings validated: ``parse_config`` turns pydantic's report into one line per wrong setting that names
the key, what was given, and the valid choices (for a typo'd key, the closest valid ones first);
``check_engine`` refuses a setting the chosen engine does not have.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpulab import engine_registry as engines
from gpulab.config.schema import RunConfig, Settings, TrainerSettings
from gpulab.errors import ConfigError, choices

S = TypeVar("S", bound=Settings)


def validate_run(user: dict[str, Any]) -> RunConfig:
    """A run's settings (``gpulab train``'s layers, a script's dict), validated once: one line per
    mistake, and a setting the chosen engine lacks refused. What the run does next (its engine's resolve,
    its trainer) takes this object as it is and validates nothing of it again."""
    config = parse_config(RunConfig, user)
    check_engine(config)
    return config


def validated(user: dict[str, Any] | RunConfig) -> RunConfig:
    """A run's settings: a ``RunConfig`` as it is (``validate_run`` made it, before the framework was
    imported), a dict (a script's) validated here, once."""
    return user if isinstance(user, RunConfig) else validate_run(user)


def trainer_settings_of(settings: TrainerSettings | None, given: dict[str, Any]) -> TrainerSettings:
    """A trainer's settings: ``settings`` as validated already (``RunConfig.trainer_settings`` of a run's
    ``validate_run``: gpulab's verbs), or the keyword settings a user's script gave, validated here (the
    trainer then checks against its engine those ``engine_checked`` does not vouch for)."""
    if settings is None:
        return parse_config(TrainerSettings, given)
    if given:
        raise ConfigError(f"give a trainer settings= or keyword settings ({', '.join(given)}), not both")
    return settings


def assign(settings: Settings, values: dict[str, Any]) -> None:
    """Set ``values`` on ``settings`` (validated already), each validated as the setting it names alone:
    one line per mistake, as ``parse_config``'s."""
    model, lines = type(settings), []
    for key, value in values.items():
        if key not in model.model_fields:
            lines.append(
                f"unknown setting {key!r}; valid settings: {choices(_closest(key, list(model.model_fields)))}"
            )
            continue
        try:
            setattr(settings, key, value)
        except ValidationError as exc:
            lines += _lines(model, values, exc, "")
    if lines:
        raise ConfigError("\n".join(lines))


def check_engine(settings: TrainerSettings, only: Collection[str] | None = None) -> None:
    """Refuse, in one line, a setting the chosen engine does not have (it would be silently ignored): the
    engine object says what it lacks (``Engine.lacks``); the line names the engines that have it.
    ``only``: these settings alone (a recipe's defaults, laid under settings checked already)."""
    engine = engines.get(settings.engine)
    given = settings.model_fields_set if only is None else settings.model_fields_set & set(only)
    for name in sorted(given & set(engine.lacks)):
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
    if only is None:
        settings._engine_checked = True


def engine_checked(settings: TrainerSettings) -> bool:
    """Whether ``check_engine`` passed these settings whole (a run's, before its framework loaded)."""
    return settings._engine_checked


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


def many_unknown(model: type[BaseModel], unknown: list[str], prefix: str = "") -> str:
    """``5,000 unknown settings ('k0', 'k1', 'k2' and 4,997 more): is this a gpulab config? ...``"""
    more = f" and {len(unknown) - 3:,} more" if len(unknown) > 3 else ""
    return (
        f"{len(unknown):,} unknown settings{' under ' + prefix.rstrip('.') if prefix else ''} "
        f"({', '.join(map(repr, unknown[:3]))}{more}): is this a gpulab config? valid settings: "
        f"{choices(list(model.model_fields))}"
    )


def parse_config(model: type[S], data: dict[str, Any] | None, prefix: str = "") -> S:
    """Validate ``data`` against ``model``; each problem becomes one line of a ``ConfigError``.

    ``prefix`` names where ``data`` sits in the whole config (``"options."`` for a recipe's settings).
    """
    data = dict(data or {})
    unknown = [str(k)[:40] for k in data if k not in model.model_fields]
    if len(unknown) > MAX_UNKNOWN:  # not a gpulab config at all: one line, before pydantic walks it
        raise ConfigError(many_unknown(model, unknown, prefix))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = _lines(model, data, exc, prefix)
        more = [f"and {len(lines) - MAX_LINES} more mistakes"] if len(lines) > MAX_LINES + 1 else []
        raise ConfigError("\n".join(lines[: MAX_LINES if more else None] + more)) from None
