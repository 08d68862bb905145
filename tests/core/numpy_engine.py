"""A third engine, in the test tree only: gradient descent on a linear model in NumPy (float64).

It proves the seam: everything a fit does -- epochs, accumulation windows, callbacks, checkpoint then
validate, the clock, the result, summary.json -- comes from ``gpulab.core.loop`` and ``gpulab.core.run``;
this file supplies only the engine's parts (``EngineStep``, ``RunSteps``) and its checkpoint files, written
with the project's storage (``gpulab.checkpoint``: the atomic commit, MANIFEST, ``latest``, verified resume).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulab.checkpoint.io import META, TMP_PREFIX, fsync_file, step_dir_name
from gpulab.checkpoint.locate import choose_resume, locate_for_resume
from gpulab.checkpoint.read import load_meta
from gpulab.checkpoint.save import commit_checkpoint, meta_bytes
from gpulab.config import RunConfig, validated, with_defaults
from gpulab.core import loop
from gpulab.core import run as core_run
from gpulab.core.callbacks import CallbackList, default_callbacks
from gpulab.core.context import FitContext
from gpulab.core.engine_step import EngineStep
from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.core.plan import plan_fit
from gpulab.core.run import RunSteps
from gpulab.core.state import FitResult, FitState
from gpulab.core.summary import environment as core_environment
from gpulab.engine_registry import CheckpointLayout
from gpulab.errors import ConfigError

NAME = "numpy"
LAYOUT = "numpy"  # the MANIFEST layout of its checkpoints: weights.npz and meta.json
WEIGHTS = "weights.npz"


@dataclass
class LinearRecipe:
    x: np.ndarray
    y: np.ndarray
    val: tuple[np.ndarray, np.ndarray]
    lr: float = 0.05
    defaults: dict[str, Any] = field(default_factory=lambda: {"epochs": 3, "batch_size": 16})
    info: dict[str, Any] = field(default_factory=dict)


def linear(options: dict[str, Any] | None = None) -> LinearRecipe:
    """y = x . w_true + 0.5 + noise, 100 training and 20 validation samples of 4 features."""
    o = {"samples": 100, "features": 4, **(options or {})}
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(o["samples"] + 20, o["features"]))
    y = x @ rng.normal(size=o["features"]) + 0.5 + 0.1 * rng.normal(size=len(x))
    n = o["samples"]
    return LinearRecipe(x[:n], y[:n], (x[n:], y[n:]), info={"parameters": o["features"] + 1})


class _OneProcess:
    """What ``locate_for_resume`` reads of a runtime: this engine runs in one process."""

    world_size, rank, is_rank_zero = 1, 0, True


class NumpyTrainer(EngineStep):
    """``NumpyTrainer(settings, trajectory, callbacks).fit(recipe, resume) -> FitResult``."""

    sample_scale = 1
    threads_hint = ""
    has_schedule = False  # a constant learning rate

    def __init__(self, settings: RunConfig, trajectory: dict[str, Any], callbacks: list[Any] = ()) -> None:
        self.settings = settings
        self.trajectory = trajectory
        self._extra_callbacks = list(callbacks)
        self.state, self.history, self.extras = FitState(), [], {}
        self.resumed_from = None
        self.is_rank_zero = True

    def fit(self, recipe: LinearRecipe, resume: str | None = None) -> FitResult:
        return loop.fit(self, lambda: self._setup(recipe, resume))

    def _setup(self, recipe: LinearRecipe, resume: str | None) -> CallbackList:
        s = self.settings
        self.x, self.y, self.val, self.lr = recipe.x, recipe.y, recipe.val, recipe.lr
        self.w, self.b = np.zeros(self.x.shape[1]), 0.0
        self._grad_w, self._grad_b = np.zeros_like(self.w), 0.0
        self._losses: list[float] = []
        self.plan = plan_fit(s, -(-len(self.x) // s.batch_size), s.accumulate)
        self.state = self.plan.fresh_state()
        root = s.checkpoint_dir or (f"{s.out_dir}/checkpoints" if s.out_dir else None)
        self.checkpointer = None if root is None else _Checkpointer(Path(root))
        if resume and self.checkpointer is None:
            raise ConfigError("resume needs a checkpoint directory: set out_dir or checkpoint_dir")
        which = choose_resume(self.checkpointer.root, resume, True) if resume else None
        if which:
            self.resumed_from = self.checkpointer.resume(self, which)
            self.extras["resumed_from"] = str(self.resumed_from)
        return CallbackList(default_callbacks(s, True) + self._extra_callbacks)  # the loop's

    # -- the loop's steps -------------------------------------------------------------------------------
    def epoch_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each epoch's order is a function of (seed, epoch): a resumed run continues with the next batch."""
        state, size = self.state, self.settings.batch_size
        order = np.random.default_rng([self.settings.seed, state.epoch]).permutation(len(self.x))
        for start in range(state.batch_in_epoch * size, len(self.x), size):
            rows = order[start : start + size]
            yield self.x[rows], self.y[rows]

    def micro_step(self, batch: Any, window: int, closes: bool) -> int:
        x, y = batch
        error = x @ self.w + self.b - y
        self._losses.append(float(np.mean(error**2)))
        self._grad_w += 2 * x.T @ error / len(x) / window  # the window's mean, as one big batch
        self._grad_b += 2 * float(np.mean(error)) / window
        if closes:
            self.w -= self.lr * self._grad_w
            self.b -= self.lr * self._grad_b
            self._grad_w, self._grad_b = np.zeros_like(self.w), 0.0
        return len(x)

    def read_loss(self) -> float | None:
        if not self._losses:
            return None
        loss, self._losses = float(np.mean(self._losses)), []
        if not np.isfinite(loss):
            raise NonFiniteLossError(f"the training loss became NaN/inf by step {self.state.global_step}")
        return loss

    def learning_rate(self) -> float:
        return self.lr

    def first_step(self) -> float | None:
        return self._losses[-1]

    def save_checkpoint(self) -> Path:
        return self.checkpointer.save(self)

    def validate(self, track: Callable[[Iterable[Any]], Iterator[Any]]) -> dict[str, float]:
        total = count = 0.0
        for x, y in track([self.val]):
            total += float(np.sum((x @ self.w + self.b - y) ** 2))
            count += len(x)
        return {"val_loss": total / count} if count else {}

    @property
    def has_validation(self) -> bool:
        return self.val is not None

    def fit_context(self) -> FitContext:
        return FitContext(
            engine=NAME, device="cpu", device_type="cpu", device_index=None, rank=0, world_size=1,
            settings=self.settings, state=self.state, resumed_from=self.resumed_from,
            trajectory=self.trajectory,
        )  # fmt: skip

    def result_facts(self) -> dict[str, Any]:
        s = self.settings
        return {
            "device": "cpu",
            "precision": "fp64",
            "strategy": "single",
            "world_size": 1,
            "batch_size": s.batch_size,
        }

    def memory(self) -> tuple[int, dict[str, Any]]:
        return 0, {}

    def describe_batch(self, batch: Any) -> str:
        return ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in batch)


class _Checkpointer:
    """The weights in ``weights.npz``, the progress and the unread losses in meta.json; the atomic commit,
    MANIFEST, ``latest`` and the verified resume are the project's (``gpulab.checkpoint``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.last_saved_step: int | None = None

    def save(self, t: NumpyTrainer) -> Path:
        state = t.state
        name = step_dir_name(state.global_step)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{TMP_PREFIX}{name}"
        tmp.mkdir()
        np.savez(tmp / WEIGHTS, w=t.w, b=np.array(t.b))
        fsync_file(tmp / WEIGHTS)
        progress = {k: getattr(state, k) for k in ("epoch", "global_step", "batch_in_epoch", "samples_seen")}
        meta = {"engine": NAME, "progress": progress, "train_loss": t._losses, "metrics": dict(state.metrics)}
        path = commit_checkpoint(
            tmp, self.root, name, None, meta_bytes(state.global_step, {}, meta, {"numpy": np.__version__}),
            layout=LAYOUT, needed=0,
        )  # fmt: skip
        self.last_saved_step = state.global_step
        return path

    def resume(self, t: NumpyTrainer, which: str) -> Path:
        path = locate_for_resume(self.root, which, _OneProcess(), t.extras)
        meta = load_meta(path / META)
        with np.load(path / WEIGHTS) as weights:
            t.w, t.b = weights["w"].copy(), float(weights["b"])
        for key, value in meta["progress"].items():
            setattr(t.state, key, int(value))
        t.state.metrics.update(meta["metrics"])
        t._losses = list(meta["train_loss"])
        self.last_saved_step = t.state.global_step
        return path


class NumpyRun(RunSteps):
    """The engine's part of ``gpulab.core.run.run``."""

    def resolve(self, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
        settings = validated(user)  # as it is when gpulab train validated it already
        recipe = linear(settings.options)
        return with_defaults(settings, recipe.defaults), recipe

    def rank(self) -> int:
        return 0

    def trainer(self, config: RunConfig, callbacks: list[Any]) -> NumpyTrainer:
        settings = config.model_copy()
        trajectory = {"recipe": config.recipe, "options": config.options}
        return NumpyTrainer(settings, trajectory, callbacks)

    def fit(self, trainer: NumpyTrainer, recipe: LinearRecipe, resume: str | None) -> FitResult:
        return trainer.fit(recipe, resume)

    def environment(self) -> dict[str, Any]:
        return core_environment({"numpy": np.__version__}, None)


class NumpyCheckpoints:
    """What a MANIFEST of its layout lists (``engine_capabilities.Checkpoints``)."""

    layouts = {LAYOUT: CheckpointLayout((WEIGHTS, META))}


class NumpyEngine:
    """The engine object ``gpulab.engine_registry.get`` returns: what ``gpulab train`` asks of it."""

    name = NAME
    checkpoints = NumpyCheckpoints()  # its only capability: it checkpoints (no export, inspect, ...)
    lacks: dict[str, Any] = {}  # every shared setting is taken (most are ignored: this is a test's engine)
    framework, framework_module, extra = "NumPy", "numpy", "numpy"

    def resolve(self, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
        return NumpyRun().resolve(user)

    def run(self, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, FitResult, Path | None]:
        return core_run.run(NumpyRun(), user)


ENGINE = NumpyEngine()
