"""A whole run from a configuration, written once for every engine: settings -> trainer -> run directory.

    run = resolve (recipe + settings) -> claim the directory -> trainer.fit (SIGTERM/SIGINT stop it at a
          step with a checkpoint) -> preempted? nothing left? -> summary.json (rank zero)

Each engine supplies a ``RunSteps``: how it resolves the settings, which rank this process is, its trainer
and how a recipe trains on it, what it writes beside the summary, and its environment. Settings are
layered recipe defaults < YAML < flags < --set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gpulab.config.layering import with_defaults
from gpulab.config.schema import RunConfig
from gpulab.core.callbacks import Callback
from gpulab.core.callbacks.preemption import StopOnSignal
from gpulab.core.callbacks.trackers import LateFiles
from gpulab.core.preemption import SignalWatch, preempted_error
from gpulab.core.recorded import with_recorded_settings
from gpulab.core.run_dir import check_output_dirs, checkpoint_root, claim, prepare
from gpulab.core.state import FitResult
from gpulab.core.summary import run_files, write_summary

U = TypeVar("U", dict[str, Any], RunConfig)


class RunSteps(Protocol):
    """An engine's part of ``run``."""

    def resolve(self, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
        """The merged, validated settings and the recipe ``user`` names: a ``RunConfig`` was validated
        before the framework was imported and is taken as it is (``config.validate.validated``), a dict
        is validated once; the recipe's defaults are laid under (``config.layering.with_defaults``)."""
        ...

    def rank(self) -> int:
        """This process's rank among the run's (0 alone)."""
        ...

    def trainer(self, config: RunConfig, callbacks: list[Callback]) -> Any:
        """The engine's trainer for ``config`` (its trajectory: the recipe and its options)."""
        ...

    def fit(self, trainer: Any, recipe: Any, resume: str | None) -> FitResult: ...

    def environment(self) -> dict[str, Any]:
        """Versions and device name for summary.json."""
        ...

    def prepares(self, rank: int) -> bool:
        """Whether this process prepares the run directory (rank zero of a first attempt)."""
        return rank == 0

    def outputs(self, trainer: Any, recipe: Any, out: Path) -> dict[str, Any]:
        """Files the engine writes beside the summary at the end (rank zero), and the summary's ``info``."""
        return dict(recipe.info)


def run(engine: RunSteps, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, FitResult, Path | None]:
    """Train as ``user`` says; returns the output directory on rank 0 (which writes it), else None.

    Holds ``out``'s lock for the run (``run_dir.py``). While it trains, the first SIGTERM/SIGINT stops it at
    the next step with a checkpoint and raises ``Preempted`` (exit 128 + N from the CLI).
    """
    config, recipe = engine.resolve(with_recorded_settings(default_resume(user)))
    out = Path(config.out_dir or f"runs/{config.recipe}")
    check_output_dirs(out, config.checkpoint_dir)
    rank = engine.rank()
    started = checkpoint_root(out, config.checkpoint_dir).is_dir()  # before the lock makes it
    with claim(out, rank, config.checkpoint_dir), SignalWatch() as signals:
        if engine.prepares(rank):
            prepare(out, config.checkpoint_dir, config.resume, config.overwrite, started)
        late_files = LateFiles()
        trainer = engine.trainer(config, [StopOnSignal(signals), late_files])
        result = engine.fit(trainer, recipe, config.resume)
        if "preempted" in result.extras:  # no summary: the run is not finished
            raise preempted_error(result.extras["preempted"], trainer.is_rank_zero)
        if not trainer.is_rank_zero:
            return config, result, None
        if "nothing_to_do" in result.extras:  # a finished run resumed: its files stay as they were
            return config, result, out
        info = engine.outputs(trainer, recipe, out)
        write_summary(out, config, result, info, engine.environment())
        late_files.send(run_files(out))
    return config, result, out


def default_resume(user: U, environ: Mapping[str, str] | None = None) -> U:
    """``resume: auto`` for a job under torchrun's elastic agent (``gpulab launch``), or a SLURM job's
    requeued attempt (``SLURM_RESTART_COUNT``), unless the user chose: a restarted attempt then continues
    from the last one's last checkpoint instead of starting over. ``user``: a dict, or the settings
    validated already (a copy then, the user's object left as it was)."""
    environ = os.environ if environ is None else environ
    requeued = environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0")
    if isinstance(user, RunConfig):
        if user.resume is None and ("TORCHELASTIC_RUN_ID" in environ or requeued):
            return with_defaults(user, {"resume": "auto"})
        return user
    if user.get("resume") is None and ("TORCHELASTIC_RUN_ID" in environ or requeued):
        return {**user, "resume": "auto"}
    return user
