"""What an engine offers beyond running a fit: one capability object per verb, each optional. A verb asks
``engine_registry.capability(engine, "export")`` for the object (an engine without it: one line naming the
engines that have it); the engine's module holds the object, which imports the framework only when a method
runs. Each protocol here is what its verb reads, the wording of that verb's reports among it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpulab.engine_registry import CheckpointLayout


class Export(Protocol):
    """``gpulab export`` of a run of this engine (``export/api.py``, ``artifact/formats.py``)."""

    # the formats a run of this engine exports to -> the module of each (``artifact.formats.register`` adds)
    formats: dict[str, str]
    refusal: str  # why another engine's run cannot take one of them ("needs a TensorFlow-engine run")
    precisions: tuple[str, ...] | None  # the --precision choices; None: all
    model: str  # what it writes, as an error names it

    def run(self, path: Path, module: Any, fixed: int | None, **request: Any) -> Any:
        """Export ``path`` to ``module``'s format (``request``: out, precision, input_file, trust, output):
        an ``ExportResult``."""


# ``diagnosis``: a ``measure.diagnosis_advice.Advice``, the words of the diagnosis's fixes and the settings
# each names (an engine without it is advised in words every engine takes: ``diagnosis_advice.NEUTRAL``).


class Checkpoints(Protocol):
    """An engine that checkpoints: what a MANIFEST of each of its layouts must list (``checkpoint/io.py``
    verifies it; ``engine_registry.for_layout`` finds the engine that wrote a checkpoint)."""

    layouts: Mapping[str, CheckpointLayout]


class CheckpointInspect(Protocol):
    """``gpulab checkpoint inspect`` of this engine's checkpoints."""

    def read(self, directory: Path, meta: dict[str, Any], report: dict[str, Any]) -> None:
        """Check what this engine's files in a verified checkpoint hold, as its resume reads them; add
        problems and the recipe they name to ``report``."""


class CheckpointExport(Protocol):
    """``gpulab checkpoint export`` of this engine's checkpoints."""

    def run(self, directory: Path, out: Path) -> Path:
        """A verified checkpoint's weights alone, as one file (``out``)."""


class Inspect(Protocol):
    """``gpulab inspect`` of a run of this engine (``profiling/inspect.py``, ``cli/inspect.py``)."""

    flop_counter: str  # how it counted FLOPs, as printed
    cast_note: tuple[str, str]  # (the mark, what runs cast): the note on layers in another dtype

    def run(self, user: dict[str, Any]) -> Any:
        """An ``InspectReport`` of the run ``user`` describes."""


class Profile(Protocol):
    """``gpulab profile`` of a run of this engine (``cli/profile.py``)."""

    view: str  # "phases" (a per-phase breakdown) or "steps" (step time only): how the CLI renders it
    compiler: str  # what compile: true runs, as the report names it ("torch.compile", "XLA")

    def run(self, user: dict[str, Any], out_dir: Path, options: Any) -> Any:
        """A ``ProfileResult``."""


class Tune(Protocol):
    """``gpulab tune`` on this engine (``tune/``)."""

    compile_failure: str  # a trial whose compile failed, in the engine's words

    def tuner(self) -> Any:
        """Tune's hooks: resolve, knobs and their walking order, one trial's fit."""


class Bench(Protocol):
    """``gpulab bench --engine NAME``: its side of the suites (``bench/``), and the comparison's words."""

    in_process: bool  # its suites run in bench's process on a torch device (else its worker picks one)
    prefix: str  # results.json names its side of suite S "<prefix>S"
    compile: tuple[str, str]  # the compile suite's uncompiled and compiled (default) variants
    speedup: tuple[str, str]  # that suite's figure (compiled over uncompiled) and what it is, in words

    def check(self) -> None:
        """Raise a one-line error when its side cannot run here."""

    def environment(self) -> dict[str, Any]:
        """Its part of results.json's environment, where its suites run in bench's process."""

    def run(self, names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
        """Run its side of the suites ``names`` into ``doc``."""


class Doctor(Protocol):
    """``gpulab doctor``: the engine's own checks of the machine."""

    def checks(self, facts: Any) -> list[Any]:
        """Its ``hardware.checks.Check``s of the machine's ``Facts`` (none where they do not apply)."""


class Launch(Protocol):
    """``gpulab launch --engine NAME`` (``cli/launch.py``)."""

    options: tuple[tuple[str, str, Any], ...]  # (option, parameter, default) only its launcher has
    templates: tuple[str, ...]  # the `launch --print` kinds it renders
    by_torchrun: bool  # its workers meet through torchrun's rendezvous (else its own launcher)

    def run(self, spec: Any, options: dict[str, Any]) -> None:
        """Start the workers of ``spec``."""


class Infer(Protocol):
    """``gpulab infer`` without ``--input``: the recipe a run's artifact names, and its validation data."""

    def recipe(self, name: str, options: Mapping[str, Any]) -> Any:
        """A built-in or user recipe by name (its validation data in this engine's layout)."""

    def inputs(self, recipe: Any, name: str, names: list[str] | None) -> tuple[tuple, Any]:
        """The recipe's validation data as an artifact's (inputs, target), NumPy arrays (a target may be a
        tree of them); ``names``: the artifact's input names, where it records them."""
