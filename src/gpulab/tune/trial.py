"""One trial: a short real fit through the Trainer at given settings, measured.

The recipe is built afresh (same seed, so the same initial weights and data order) and trained for a
fixed number of samples. Speed comes from the Trainer's own clock, which starts after the first step
(compile and autotuning excluded) and synchronises the device at every log read: each log interval
is one repeat, the first one is dropped as further warm-up, and the repeats become a ``Timing`` (the
bench harness's) whose median and spread are the trial's samples/s. The loss is the validation loss
after those samples (the last training loss when the recipe has no validation data).
"""

from __future__ import annotations

import contextlib
import io
import math
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulab import engine_registry as engines
from gpulab.config.layering import merge
from gpulab.core.callbacks import Callback
from gpulab.core.nonfinite import NonFiniteLossError
from gpulab.errors import GpulabError
from gpulab.measure.harness import Timing
from gpulab.measure.results import Figure

# Settings every trial runs with: no files, no progress display, no MFU count (it costs a second), no
# tracker (a trial is no run of the user's: it would be one MLflow / W&B run per trial).
QUIET = {
    "out_dir": None,
    "progress": False,
    "mfu": False,
    "tensorboard": False,
    "trackers": [],
    "checkpoints": False,
}
INTERVALS = 6  # log reads per trial: the first is warm-up, the rest are the repeats
BUDGET_RAN_OUT = "the budget ran out during this trial"  # (a trial cut by its cap says so instead)


@dataclass
class Trial:
    """What one trial measured, or why it has no figures. ``status``: ok | rejected | failed | stopped."""

    label: str
    settings: dict[str, Any]  # the knobs this trial ran with
    status: str = "ok"
    reason: str = ""
    samples_per_s: Figure | None = None
    peak_memory_mib: float | None = None
    loss: float | None = None
    accuracy: float | None = None
    samples: int = 0
    steps: int = 0
    batch_size: int | None = None
    precision: str | None = None
    warmup_s: float | None = None  # the first step: compile, autotuning, worker start-up
    wall_s: float = 0.0  # on the search's clock
    clock_rate: float | None = None  # samples/s after the first step, on the search's clock
    cpu_used_by_others: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def rate(self) -> float:
        return self.samples_per_s.value if self.samples_per_s else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["samples_per_s"] = asdict(self.samples_per_s) if self.samples_per_s else None
        return out


class TrialStopped(Exception):
    """A trial that reached its deadline: the fit ends there (no validation, no end of epoch), unused."""


class Watch(Callback):
    """Times the first step (warm-up), measures the rate on the search's clock, and stops the fit at the
    trial's deadline: at a step's end, or inside a long step (a compile) by SIGALRM (``stop_at_deadline``)."""

    graph_safe = True  # on_step_end reads the clock, no tensor: cuda_graph may capture the step

    def __init__(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.deadline, self.clock = deadline, clock
        self.started = 0.0
        self.first_step_s: float | None = None
        self.stopped = False
        self.steps = 0
        self.after_first: tuple[float, int] | None = None  # (clock, samples) at the first step's end
        self.clock_rate: float | None = None  # samples/s after the first step, on the search's clock

    def on_fit_start(self, trainer, state) -> None:
        self.started = time.perf_counter()

    def on_step_end(self, trainer, state) -> None:
        self.steps += 1
        now = self.clock()
        if self.first_step_s is None:  # the Trainer's clock synchronised the device just before
            self.first_step_s = time.perf_counter() - self.started
            self.after_first = (now, state.samples_seen)
        elif now > self.after_first[0]:
            self.clock_rate = (state.samples_seen - self.after_first[1]) / (now - self.after_first[0])
        if now > self.deadline:
            self.stopped = True
            raise TrialStopped()


@contextlib.contextmanager
def stop_at_deadline(watch: Watch) -> Iterator[None]:
    """SIGALRM at the watch's deadline, raising ``TrialStopped`` wherever the trial is (a torch.compile
    of tens of seconds is one step; TensorFlow's C++ compile raises as it returns to Python): a trial
    never outlasts its share by a whole compile. Only on the real clock, in the main thread, on POSIX."""
    left = watch.deadline - time.monotonic()
    usable = (
        watch.clock is time.monotonic
        and math.isfinite(left)
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def stop(signum, frame) -> None:
        watch.stopped = True
        raise TrialStopped()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def engine_for(user: dict[str, Any]) -> Any:
    """The tune hooks of the user's engine (torch unless set): its tune capability's ``tuner()``."""
    return engines.capability(engines.of(user), "tune").tuner()


def plan_steps(samples: int, batch_size: int) -> tuple[int, int]:
    """(max_steps, log_every) for ``samples`` at ``batch_size``: at least one warm-up step and three
    timed intervals, so a huge batch still gets a median."""
    steps = max(math.ceil(samples / batch_size), 4)
    log_every = max(1, (steps - 1) // INTERVALS)
    return steps, log_every


def run_trial(
    user: dict[str, Any],
    knobs: dict[str, Any],
    *,
    samples: int,
    deadline: float,
    label: str,
    clock: Callable[[], float] = time.monotonic,
    stopped_because: str = BUDGET_RAN_OUT,
) -> Trial:
    """Train ``user``'s run with ``knobs`` laid over it for about ``samples`` samples and measure it;
    stopped at ``deadline`` on ``clock`` (the search's), with ``stopped_because`` as its reason."""
    trial = Trial(label, dict(knobs))
    begun = clock()
    watch = Watch(deadline, clock)
    caught: list[warnings.WarningMessage] = []
    printed = io.StringIO()  # the run's own lines (channels_last, ...): kept in tune.json, not shown
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            with stop_at_deadline(watch):
                result = _fit(user, knobs, samples, watch, trial)
    except Exception as exc:
        if not watch.stopped:  # raised by the trial itself, not by its deadline
            _failed(trial, exc, user, knobs)
        else:
            trial.steps = watch.steps
            trial.status, trial.reason = "stopped", stopped_because
    else:
        _read(trial, result, watch, knobs)
    finally:
        trial.wall_s = clock() - begun
        trial.clock_rate = watch.clock_rate
    if printed.getvalue().strip():
        trial.extras["printed"] = printed.getvalue()[-2000:]
    notes = [str(w.message) for w in caught if "compile" in str(w.message).lower()]
    if notes:
        trial.extras["warnings"] = notes
    return trial


def _failed(trial: Trial, exc: Exception, user: dict[str, Any], knobs: dict[str, Any]) -> None:
    """Why a trial failed, from what it raised (a knob this model cannot take is named, not fatal)."""
    line = (str(exc).strip().splitlines() or [""])[0][:200]
    oom = None
    if isinstance(exc, NonFiniteLossError):
        trial.status, trial.reason = "rejected", f"loss not finite: {exc}"
    elif isinstance(exc, GpulabError):
        trial.status, trial.reason = "failed", str(exc)
    else:  # the engine knows its framework's out-of-memory error; else a compile error, say
        oom = engine_for(merge(user, knobs)).out_of_memory(exc)
        trial.status, trial.reason = "failed", oom or f"{type(exc).__name__}: {line}"
    if oom is None and not isinstance(exc, (GpulabError, NonFiniteLossError)):
        # an out-of-memory error's traceback says nothing the reason does not
        trial.extras["traceback"] = "".join(traceback.format_exception(exc, limit=-3))


def _fit(user: dict[str, Any], knobs: dict[str, Any], samples: int, watch: Watch, trial: Trial):
    merged = merge(user, knobs)
    engine = engine_for(merged)
    config, recipe, _ = engine.resolve(merged)  # seeded, the model built afresh
    settings = _trial_settings(config, samples, trial, exclude_unset=engine.settings_set_only)
    return engine.fit(config, recipe, settings, watch)


def _trial_settings(config: Any, samples: int, trial: Trial, *, exclude_unset: bool) -> dict[str, Any]:
    """The run's settings for a trial: quiet, no files, ``samples`` samples in timed intervals."""
    steps, log_every = plan_steps(samples, int(config.batch_size))
    trial.steps, trial.batch_size = steps, int(config.batch_size)
    exclude = {"recipe", "options", "resume", "overwrite"}
    settings = config.model_dump(exclude_unset=exclude_unset, exclude=exclude)
    settings.update(QUIET, max_steps=steps, log_every=log_every, epochs=1)
    return settings


def _read(trial: Trial, result: Any, watch: Watch, knobs: dict[str, Any]) -> None:
    trial.steps, trial.precision = result.steps, result.precision
    trial.samples = result.steps * (result.batch_size or 0)
    trial.warmup_s = watch.first_step_s
    trial.peak_memory_mib = result.peak_memory_bytes / 2**20 if result.peak_memory_bytes else None
    trial.loss = result.val_loss if result.val_loss is not None else result.final_loss
    trial.accuracy = result.accuracy
    trial.cpu_used_by_others = (result.extras.get("machine_load") or {}).get("cpu_used_by_others")
    if knobs.get("compile") and not result.compiled:
        trial.status = "failed"
        trial.reason = engines.capability(engines.get(result.extras.get("engine")), "tune").compile_failure
        return
    rates = [h["samples_per_s"] for h in result.history if h.get("samples_per_s")]
    rates = rates[1:] if len(rates) > 2 else rates  # the first interval may still hold warm-up
    if not rates:
        trial.status, trial.reason = "failed", "no timed interval (too few steps)"
        return
    b = result.batch_size
    trial.samples_per_s = Timing(tuple(b / r for r in rates)).rate(b, "samples/s")
    trial.extras["rates"] = rates  # the repeats, so two trials of one config can be pooled
    if trial.loss is None or not math.isfinite(trial.loss):
        trial.status, trial.reason = "rejected", f"loss not finite ({trial.loss})"


def largest_batch(user: dict[str, Any], knobs: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The largest batch that fits with ``knobs``: the engine's batch search (its tuner's
    ``largest_batch``; torch's only, the search asks it from torch's knob walk).
    Returns ({batch_size, cap, memory_binds, search}, "") or (None, why it could not run)."""
    return engine_for(merge(user, knobs)).largest_batch(user, knobs)
