"""The engine registry: one object per framework behind one protocol, found by name and imported on first
use. It lives beside config, below everything that asks it (config, checkpoint, artifact, the verbs) and
below the engines it registers (``engines/<name>/``), so no package imports one above it.

A verb (train, profile, inspect, export, launch, bench, tune, doctor) asks ``get(name)`` for everything
engine-specific, and config asks it what settings an engine lacks; no code outside ``engines/`` and this
module compares an engine's name or keeps a table of engines. ``get`` imports only the engine asked for,
and an engine module imports its framework only when a method needs it: a torch run never loads the
TensorFlow engine, a TensorFlow run never loads the torch one. This module imports nothing of gpulab but
errors, so config, checkpoint and artifact can ask it.

To add an engine: a folder ``engines/<name>/`` whose module's ``ENGINE`` satisfies ``Engine``, and its line
in ``_REGISTRY`` (docs/ARCHITECTURE.md, "How to add an engine"); or, at run time (a plugin, a test's
engine), ``register(name, loader)``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from gpulab.errors import ConfigError, choices

DEFAULT = "torch"  # a run that names no engine


@dataclass(frozen=True)
class Lack:
    """A setting an engine lacks (or some values of): the values it takes there (``takes``; None: only the
    setting's default) or, instead, the values it refuses (``refuses``); ``said``: how the refusal names
    what to write instead, where the values do not say it."""

    takes: tuple | None = None
    refuses: tuple = ()
    said: str = ""

    def allows(self, value: Any, default: Any) -> bool:
        if self.refuses:
            return value not in self.refuses
        return value == default if self.takes is None else value in self.takes

    def valid(self, default: Any) -> str:
        if self.said:
            return self.said
        if self.takes:
            return f"valid there: {choices(self.takes)}"
        return f"leave it unset (default {default!r})"


@dataclass(frozen=True)
class CheckpointLayout:
    """What a checkpoint of one MANIFEST layout must list (``checkpoint/io.py`` verifies it): ``files``
    always, and ``implied(listed)``: files the listed ones imply (a TensorFlow checkpoint's data shards,
    counted in their names)."""

    files: tuple[str, ...]
    implied: Callable[[Collection[str]], list[str]] | None = None

    def required(self, listed: Collection[str]) -> list[str]:
        return [*self.files, *(self.implied(listed) if self.implied else [])]


class Engine(Protocol):
    """What the verbs need of an engine. Methods import the framework (and the engine's part of the verb,
    engines/<name>/) when called, never at the engine module's import."""

    name: str
    framework: str  # the framework's name as people write it ("PyTorch"): reports and error lines
    framework_module: str  # its import name: a ModuleNotFoundError for it means the engine's extra is missing
    extra: str  # the pip extra that installs it: pip install 'gpulab[<extra>]'
    lacks: Mapping[str, Lack]  # settings it does not have: config.check_engine refuses them in one line

    def resolve(self, user: Any) -> tuple[Any, Any]:
        """The merged, validated settings (a ``RunConfig``) and the recipe ``user`` names; ``user``: a
        dict, or a ``RunConfig`` validated already (``gpulab train``'s), taken as it is."""

    def run(self, user: Any) -> tuple[Any, Any, Path | None]:
        """``gpulab train``: train, write the run directory (rank zero); return the settings, the
        ``FitResult`` and the directory's path there."""


class _Line(NamedTuple):
    """An engine's line in the registry: what is known of it without importing it."""

    loader: str | Callable[[], Engine]  # the module holding ``ENGINE``, or a function returning it
    help: str  # what ``--engine NAME`` picks, for the CLI's help
    # its built-in recipes are recipe_data's (mlp, digits, chargpt): their options are checked before the
    # framework is imported (core/early_checks.py); another engine's recipes are its own to check
    recipe_data: bool = False


# The registry: name -> its line (read by the CLI's help and the early checks, no engine imported).
_REGISTRY: dict[str, _Line] = {
    "torch": _Line("gpulab.engines.torch", "PyTorch (launch: torchrun)", recipe_data=True),
    "tensorflow": _Line(
        "gpulab.engines.tensorflow.engine", "TensorFlow/Keras (launch: TF_CONFIG workers)", recipe_data=True
    ),
}


def register(
    name: str, loader: str | Callable[[], Engine], help: str = "", *, recipe_data: bool = False
) -> None:
    """Add an engine at run time (a plugin's, a test's): ``loader`` is the module holding ``ENGINE`` or a
    function returning the engine object, ``help`` what ``--engine NAME`` picks, ``recipe_data`` whether
    its built-in recipes are ``gpulab.recipe_data``'s. From then on config takes ``engine: NAME`` and every
    verb reaches it through ``get``; the built-ins' lines are ``_REGISTRY``'s."""
    _REGISTRY[name] = _Line(loader, help or name, recipe_data)


def names() -> tuple[str, ...]:
    """Every engine's name, the built-ins first (nothing imported)."""
    return tuple(_REGISTRY)


def option_help() -> str:
    """The help of an ``--engine`` option: each name and what it picks (nothing imported)."""
    return "; ".join(f"{name}: {line.help}" for name, line in _REGISTRY.items()) + f" [default: {DEFAULT}]"


def builds_recipe_data(name: str | None) -> bool:
    """Whether the engine ``name`` (None: the default) trains the built-in recipes of
    ``gpulab.recipe_data``, so that their options can be checked before it is imported (nothing
    imported; an unknown name: False, config says what is wrong with it)."""
    name = name or DEFAULT
    line = _REGISTRY.get(name) if isinstance(name, str) else None
    return line is not None and line.recipe_data


def get(name: str | None) -> Engine:
    """The engine called ``name`` (None: the default), its module imported now."""
    name = name or DEFAULT
    if name not in _REGISTRY:
        raise ConfigError(f"unknown engine {name!r}; valid: {choices(names())}")
    loader = _REGISTRY[name][0]
    return importlib.import_module(loader).ENGINE if isinstance(loader, str) else loader()


def offered(engine: Engine, verb: str) -> Any:
    """The engine's capability object for ``verb`` (``engine_capabilities``: its attribute of that name,
    "checkpoint inspect" -> ``checkpoint_inspect``), None where it has none."""
    return getattr(engine, verb.replace(" ", "_"), None)


def capability(engine: Engine, verb: str) -> Any:
    """The engine's capability object for ``verb``; where it has none, one line naming the engines that do
    (every engine module is light: this loads no framework)."""
    found = offered(engine, verb)
    if found is None:
        have = [name for name in _REGISTRY if offered(get(name), verb) is not None]
        raise ConfigError(
            f"the {engine.name} engine has no {verb}; engines that do: {choices(have) or 'none'}"
        )
    return found


def find(has: Callable[[Engine], bool]) -> Engine | None:
    """The first engine ``has`` holds for, asking the engines already imported first: a TensorFlow run
    reading its own checkpoints or exporting to its own format never loads another engine's module."""
    loaded = [n for n in _REGISTRY if not isinstance(_REGISTRY[n][0], str) or _REGISTRY[n][0] in sys.modules]
    return next((e for e in map(get, loaded + [n for n in _REGISTRY if n not in loaded]) if has(e)), None)


def for_layout(layout: str) -> Engine:
    """The engine whose checkpoints have the MANIFEST ``layout`` (engine modules load no framework)."""
    engine = find(lambda e: layout in checkpoint_layouts(e))
    if engine is None:
        raise ConfigError(f"checkpoint layout {layout!r} is no engine's; valid: {choices(layouts())}")
    return engine


def checkpoint_layout(layout: str) -> CheckpointLayout | None:
    """What a checkpoint of MANIFEST ``layout`` must hold, from the engine that writes it; None: no
    engine's."""
    engine = find(lambda e: layout in checkpoint_layouts(e))
    return checkpoint_layouts(engine)[layout] if engine else None


def layouts() -> list[str]:
    """Every registered engine's checkpoint layouts."""
    return [layout for name in _REGISTRY for layout in checkpoint_layouts(get(name))]


def checkpoint_layouts(engine: Engine) -> Mapping[str, CheckpointLayout]:
    """The MANIFEST layouts of ``engine``'s checkpoints (its ``checkpoints`` capability; none without)."""
    checkpoints = offered(engine, "checkpoints")
    return checkpoints.layouts if checkpoints else {}


def for_framework(module: str | None) -> Engine | None:
    """The engine whose framework imports as ``module`` (a ModuleNotFoundError's name), if any."""
    return next((e for e in map(get, _REGISTRY) if e.framework_module == module), None)


def of(user: Mapping[str, Any]) -> Engine:
    """The engine a user's settings name (``engine``; torch when unset)."""
    return get(user.get("engine"))
