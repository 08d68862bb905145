"""Engines: one object per framework behind one protocol, found by name and imported on first use.

A verb (train, profile, inspect, export, launch, bench, tune) asks ``get(name)`` for everything
engine-specific; no code outside ``engines/`` compares an engine's name (config keeps the list of names).
``get`` imports only the engine asked for, and an engine imports its framework only when a method needs it:
a torch run never loads the TensorFlow engine, a TensorFlow run never loads the torch one.

To add an engine: a folder ``engines/<name>/`` whose module ``ENGINE`` satisfies ``Engine``, its name in
``_MODULES`` and in ``config.ENGINES`` (docs/ARCHITECTURE.md, "How to add an engine").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpulab.config import ENGINES
from gpulab.errors import ConfigError, choices

if TYPE_CHECKING:
    from gpulab.config import RunConfig
    from gpulab.core.state import FitResult

DEFAULT = "torch"  # a run that names no engine

# name -> the module holding ``ENGINE`` (imported by ``get`` only)
_MODULES = {"torch": "gpulab.engines.torch", "tensorflow": "gpulab.engines.tensorflow.engine"}


class Engine(Protocol):
    """What the verbs need of an engine. Methods import the framework (and the engine's part of the verb,
    engines/<name>/) when called, never at the engine module's import."""

    name: str
    export_formats: tuple[str, ...]  # the formats a run of this engine exports to
    export_refusal: str  # why another engine's run cannot take one of them ("needs a TensorFlow-engine run")
    export_precisions: tuple[str, ...] | None  # the --precision choices of its export; None: all
    export_model: str  # what its export writes, as an error names it
    export_named_inputs: bool  # its artifacts record input names that infer matches arrays to
    launch_options: tuple[tuple[str, str, Any], ...]  # (option, parameter, default) only its launcher has
    launch_templates: tuple[str, ...]  # the `launch --print` kinds it renders
    launch_by_torchrun: bool  # its workers meet through torchrun's rendezvous (else its own launcher)
    bench_in_process: bool  # its suites run in bench's process on a torch device (else its worker picks one)
    profile_view: str  # "phases" (a per-phase breakdown) or "steps" (step time only): how the CLI renders it
    flop_counter: str  # how inspect counted FLOPs, as printed
    cast_note: tuple[str, str]  # (the mark, what runs cast): inspect's note on layers in another dtype
    compile_failure: str  # a tune trial whose compile failed, in the engine's words
    threads_hint: str  # the train report's hint when other processes competed for the CPU
    checkpoint_layouts: tuple[str, ...]  # the MANIFEST layouts its checkpoints have (checkpoint/io.py)

    def resolve(self, user: dict[str, Any]) -> tuple[RunConfig, Any]:
        """The merged, validated settings and the recipe ``user`` names."""

    def run(self, user: dict[str, Any]) -> tuple[RunConfig, FitResult, Path | None]:
        """``gpulab train``: train, write the run directory (rank zero); return its path there."""

    def environment(self) -> dict[str, Any]:
        """Versions and device name for summary.json and reports."""

    def profile(self, user: dict[str, Any], out_dir: Path, options: Any) -> Any:
        """``gpulab profile``: a ``ProfileResult``."""

    def inspect(self, user: dict[str, Any]) -> Any:
        """``gpulab inspect``: an ``InspectReport``."""

    def export(self, path: Path, module: Any, fixed: int | None, **request: Any) -> Any:
        """``gpulab export`` of a run of this engine to ``module``'s format (``request``: out, precision,
        input_file, trust: the user's word on a recipe the run names): an ``ExportResult``."""

    def recipe(self, name: str, options: Mapping[str, Any]) -> Any:
        """A built-in or user recipe by name (its validation data in this engine's layout)."""

    def launch(self, spec: Any, options: dict[str, Any]) -> None:
        """``gpulab launch``: start the workers of ``spec``."""

    def check_bench(self) -> None:
        """Raise a one-line error when this engine's bench side cannot run here."""

    def bench(self, names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
        """Run this engine's side of the bench ``names`` into ``doc``."""

    def tuner(self) -> Any:
        """Tune's hooks: resolve, knobs and their walking order, one trial's fit."""

    def read_checkpoint(self, directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
        """``gpulab checkpoint inspect``: check what this engine's files in a verified checkpoint hold, as
        its resume reads them; add problems and the recipe they name to ``report``."""


def get(name: str | None) -> Engine:
    """The engine called ``name`` (None: the default), its module imported now."""
    name = name or DEFAULT
    if name not in _MODULES or name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}; valid: {choices(ENGINES)}")
    return importlib.import_module(_MODULES[name]).ENGINE


def for_layout(layout: str) -> Engine:
    """The engine whose checkpoints have the MANIFEST ``layout`` (engine modules load no framework)."""
    for name in _MODULES:
        engine = get(name)
        if layout in engine.checkpoint_layouts:
            return engine
    raise ConfigError(f"checkpoint layout {layout!r} is no engine's; valid: {choices(_all_layouts())}")


def _all_layouts() -> list[str]:
    return [layout for name in _MODULES for layout in get(name).checkpoint_layouts]


def of(user: Mapping[str, Any]) -> Engine:
    """The engine a user's settings name (``engine``; torch when unset)."""
    return get(user.get("engine"))
