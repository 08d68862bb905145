"""The search: the default config first, then one knob at a time on top of the best so far (greedy,
cheap knobs first, compile last since each compile trial pays its compile), under a time budget. The
knobs and their order are the engine's (``engines.py``); the walk is the same on both.

A trial only becomes the best when it is accepted (it ran, its loss is finite and not worse than the
default's at the same samples by more than ``tolerance``) and its median samples/s beats the best's by
more than ``MIN_GAIN``: a fast config that diverges is never chosen, and noise does not pick a knob.
Pruning: a batch that did not fit rules out larger ones at the same precision; a compile mode that
failed rules out the other modes.

The budget: every trial after the default stops at the walk's deadline or after ``TRIAL_CAP`` of the
budget, whichever comes first (``trial.py``: at a step's end, or inside a long compile by SIGALRM); the walk
ends early enough to leave the final re-measure its time. That re-measure runs the default and the best
once more, back to back, and the ratio comes from that pair; a pick that is not faster there, or that
could not be re-measured in the budget, is undone: nothing is recommended unmeasured. Every ratio printed
(table, sentences, verdict) is one trial's samples/s over the default's (``vs_default``).
All of it on one clock (``clock``: time.monotonic; a test gives a stub), from when the command began (the
CLI's ``main``: the framework's import is the budget's too), ending ``FINISH_SHARE`` of it early for the
files and the report; the console command then ends without the interpreter's teardown (``cli/ending.py``),
so the budget is the process's whole life on either engine. A trial cut by its cap (``TRIAL_CAP``) says
so: the budget had time left then, and the report's "budget ran out" line is for the budget's own end.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpulab.engine_registry import DEFAULT
from gpulab.errors import ConfigError
from gpulab.measure.knobs import Candidate, Group
from gpulab.measure.results import Figure
from gpulab.tune.trial import (
    BUDGET_RAN_OUT,
    INTERVALS,
    Trial,
    TrialStopped,
    Watch,
    engine_for,
    largest_batch,
    run_trial,
    stop_at_deadline,
)

MIN_GAIN = 0.03  # a knob must beat the best by more than this to be chosen (see ``beats``)
MIN_INTERVAL_S = 0.2  # the shortest repeat worth timing (see ``trial_samples``)
TRIAL_SHARE = 8  # a trial lengthened for timing lasts at most budget / TRIAL_SHARE
TRIAL_CAP = 0.25  # no trial after the default runs past this share of the budget (a compile, say)
CONFIRM_MARGIN = 1.2  # the final re-measure is given this many times its two trials' walls
# The search ends this share of the budget before its end: tuned.yaml, tune.json, tune.png and the report
# come after it (0.4 s, and 3.6 s once after a stopped TensorFlow trial, on a 2-core machine at load 6).
FINISH_SHARE = 0.05
UNSET = {"prefetch_factor": "AUTOTUNE", "num_workers": "auto"}  # what a knob left unset means


@dataclass
class Decision:
    knob: str
    chosen: Any
    changed: bool
    sentence: str


@dataclass
class TuneResult:
    recipe: str
    device: str
    budget_s: float
    tolerance: float
    samples_per_trial: int
    default: Trial
    best: Trial
    trials: list[Trial] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    ratio: tuple[float, float, float] | None = None  # tuned/default: median, low, high
    ratio_from: str = "the default's and the best's trials in the search"
    compared: tuple[Trial, Trial] | None = None  # (tuned, default): the trials the ratio comes from
    elapsed_s: float = 0.0
    out_of_budget: bool = False
    largest: dict[str, Any] | None = None  # the batch search's outcome
    # the pick the final re-measure undid, and its ratio (None: no time was left to re-measure it)
    reverted: tuple[Trial, float | None] | None = None
    engine: str = DEFAULT
    startup_s: float = 0.0  # from the command's start to the warm-up (the framework's import, the recipe)
    yardstick_s: float = 0.0  # the warm-up and the default trial, which always run whole


def ratio(a: Figure, b: Figure) -> tuple[float, float, float]:
    """a/b as (median ratio, worst case, best case) from the two figures' spreads."""
    return a.value / b.value, a.low / b.high, a.high / b.low


def vs_default(trial: Trial, result: TuneResult) -> tuple[float, float, float]:
    """A trial's samples/s over the default's: the one figure the table, the sentences and the verdict
    print. The final re-measure's tuned trial is set against the default re-measured beside it."""
    if result.compared is not None and trial is result.compared[0]:
        return ratio(trial.samples_per_s, result.compared[1].samples_per_s)
    return ratio(trial.samples_per_s, result.default.samples_per_s)


def beats(trial: Trial, best: Trial) -> bool:
    """An accepted trial whose median beats the best's by ``MIN_GAIN`` and whose lower quartile (the
    low end of its spread) is above the best's median: on a busy machine one lucky repeat is not enough."""
    if not trial.ok or trial.samples_per_s is None:
        return False
    fig, ref = trial.samples_per_s, best.samples_per_s
    return fig.value > ref.value * (1 + MIN_GAIN) and fig.low > ref.value


def guard(trial: Trial, baseline: Trial, tolerance: float) -> None:
    """Reject a trial whose loss is not finite or worse than the default's by more than ``tolerance``."""
    if not trial.ok or trial is baseline:
        return
    base, loss = baseline.loss, trial.loss
    if loss is None or not math.isfinite(loss):
        trial.status, trial.reason = "rejected", f"loss not finite ({loss})"
    elif base is not None and loss > base + tolerance * abs(base):
        trial.status = "rejected"
        trial.reason = (
            f"loss {loss:.4g} vs the default's {base:.4g} after ~{baseline.samples:,} samples "
            f"({loss / base - 1:+.0%}; tolerance {tolerance:.0%})"
        )


def pruned(settings: dict[str, Any], trials: list[Trial]) -> str | None:
    """Why ``settings`` need no trial given what ``trials`` found, or None."""
    for t in trials:
        if t.status != "failed":
            continue
        memory_alike = _same(settings, t.settings, "precision", "activation_checkpointing")
        larger = int(settings.get("batch_size") or 0) >= int(t.settings.get("batch_size") or 0)
        if t.reason.startswith("does not fit") and memory_alike and larger:
            return f"pruned: {t.label} did not fit"
        if settings.get("compile") and t.settings.get("compile"):
            return f"pruned: compile failed in {t.label} ({t.reason})"
    return None


def trial_samples(
    steps: int,
    batch: int,
    rate: float | None,
    min_interval_s: float = MIN_INTERVAL_S,
    max_s: float = math.inf,
) -> int:
    """Samples per trial: ``steps`` default batches, or more where a log interval (one repeat) would
    be shorter than ``min_interval_s`` at ``rate`` (the warm-up's samples/s) -- the harness's
    ``min_sample_s`` rule: a repeat of a few milliseconds measures the clock and the neighbours --
    but not so many that a trial would last over ``max_s`` (a share of the budget): a slow step gets
    fewer than ``steps``, down to one per timed interval."""
    if not rate:
        return steps * batch
    per_interval = math.ceil(min_interval_s * rate / batch)
    cap = max_s * rate / (batch * (1 + INTERVALS))  # steps per interval that fill max_s
    per_interval = min(per_interval, int(cap)) if math.isfinite(cap) else per_interval
    n = max(steps, 1 + INTERVALS * max(1, per_interval))
    fill = max_s * rate / batch  # steps that fill max_s: a slow step gets fewer than ``steps``
    if n > fill:
        n = max(1 + INTERVALS, int(fill))  # still a warm-up step and a repeat per interval
    return n * batch


def _same(a: dict[str, Any], b: dict[str, Any], *keys: str) -> bool:
    return all(a.get(k) == b.get(k) for k in keys)


class Search:
    def __init__(
        self,
        user: dict[str, Any],
        *,
        budget_s: float,
        tolerance: float = 0.10,
        steps: int = 30,
        min_interval_s: float = MIN_INTERVAL_S,
        log: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ) -> None:
        """``started``: when the command began on ``clock`` (the CLI's ``main``: the framework's import and
        the settings are the budget's too); now by default."""
        if budget_s <= 0:
            raise ConfigError(f"--budget must be a positive number of seconds, got {budget_s}")
        if not 0 <= tolerance < 10:
            raise ConfigError(f"--tolerance is a fraction of the default's loss (e.g. 0.1), got {tolerance}")
        self.user, self.budget_s, self.tolerance, self.steps = user, budget_s, tolerance, steps
        self.log, self.min_interval_s = log, min_interval_s
        self.engine = engine_for(user)
        self.largest: dict[str, Any] | None = None  # the batch search's outcome (torch)
        self.largest_failed = ""
        self.clock = clock
        self.start = clock() if started is None else started
        self.deadline = self.start + budget_s * (1 - FINISH_SHARE)  # the files' time kept after it
        self.trials: list[Trial] = []
        self.skipped: list[dict[str, str]] = []
        self.decisions: list[Decision] = []

    # -- the walk ---------------------------------------------------------------------------------------
    def run(self) -> TuneResult:
        config, recipe, device = self.engine.resolve(self.user)
        self.where = "this GPU" if device.type == "cuda" else f"this {device.type.upper()}"
        knobs = {k: getattr(config, k) for k in self.engine.knobs}
        if knobs["batch_size"] == "auto":  # the search is the default itself: trials run its number
            self.largest = self.find_largest(knobs)
            knobs["batch_size"] = self.largest["batch_size"] if self.largest else 32
        # The process's first fit pays one-time start-up (thread pools, lazy kernels, caches) in its timed
        # steps too; measured first, the default would look slower than it is. A short untimed fit first.
        began = self.clock()  # the command's start-up (the framework's import, the recipe) before it
        self.log("warm-up: a short fit of the default config, not measured ...")
        warm = run_trial(self.user, knobs, samples=0, deadline=math.inf, label="warm-up", clock=self.clock)
        batch, share = int(knobs["batch_size"]), self.budget_s / TRIAL_SHARE
        rate = warm.clock_rate or warm.rate  # on the search's clock, which the shares are of
        self.samples = trial_samples(self.steps, batch, rate, self.min_interval_s, share)
        default = self._trial("default", knobs, deadline=math.inf)  # the yardstick always runs whole
        if not default.ok:
            raise ConfigError(
                f"the default config does not train, so there is nothing to compare: {default.reason}"
            )
        self.default = self.best = default
        startup_s, yardstick_s = began - self.start, self.clock() - began
        for group in self.engine.groups(self, config, recipe, device, knobs):
            self._walk(group)
        result = TuneResult(
            recipe=config.recipe,
            device=str(device),
            budget_s=self.budget_s,
            tolerance=self.tolerance,
            samples_per_trial=self.samples,
            default=self.default,
            best=self.best,
            trials=self.trials,
            skipped=self.skipped,
            decisions=self.decisions,
            largest=self.largest,
            engine=self.engine.name,
            startup_s=startup_s,
            yardstick_s=yardstick_s,
        )
        self._confirm(result)
        result.elapsed_s = self.clock() - self.start
        result.out_of_budget = any(s["reason"].startswith("budget") for s in self.skipped) or any(
            t.status == "stopped" and t.reason == BUDGET_RAN_OUT for t in self.trials
        )
        return result

    def _walk(self, group: Group) -> None:
        """Try each candidate of one knob on top of the best so far; keep the fastest accepted one."""
        if not group.candidates:
            self._skip_group(group)
            return
        for value, why in group.skipped.items():
            self.skipped.append({"knob": group.knob, "value": value, "reason": why})
        incumbent, tried = self.best, []
        for cand in group.candidates:
            settings = {**incumbent.settings, **cand.settings}
            why = pruned(settings, self.trials) or self._no_time(cand)
            if why:
                self.skipped.append({"knob": group.knob, "value": cand.label, "reason": why})
                tried.append((cand, None, why))
                continue
            trial = self._trial(cand.label, settings)
            tried.append((cand, trial, trial.reason))
            if beats(trial, self.best) and self._holds(trial):
                self.best = trial
            elif trial.ok and trial.rate > self.best.rate and not trial.reason:
                trial.reason = (
                    f"within the noise: its spread reaches down to {trial.samples_per_s.low:,.0f}, below "
                    f"{self.best.label}'s median {self.best.rate:,.0f} samples/s"
                )
        self.decisions.append(self._decide(group, incumbent, tried))

    def _trial(self, label: str, settings: dict[str, Any], deadline: float | None = None) -> Trial:
        self.log(f"trial {len(self.trials) + 1}: {label} ...")
        why = BUDGET_RAN_OUT
        if deadline is None:  # the walk's end, and no trial longer than its cap
            walk_end, cap_end = self._walk_deadline(), self.clock() + TRIAL_CAP * self.budget_s
            deadline = min(walk_end, cap_end)
            if cap_end < walk_end:  # cut there, it ran long for a trial: the budget had time left
                cap = f"{TRIAL_CAP:.0%} of the budget, {TRIAL_CAP * self.budget_s:.0f} s"
                why = f"stopped at the trial cap ({cap})"
        trial = run_trial(
            self.user,
            settings,
            samples=self.samples,
            deadline=deadline,
            label=label,
            clock=self.clock,
            stopped_because=why,
        )
        if self.trials:
            guard(trial, self.default, self.tolerance)
        self.trials.append(trial)
        speed = f"{trial.samples_per_s.value:,.0f} samples/s" if trial.samples_per_s else "-"
        loss = "-" if trial.loss is None else f"{trial.loss:.4f}"
        self.log(f"  {trial.status}: {speed}, loss {loss}, {trial.wall_s:.1f} s {trial.reason}".rstrip())
        return trial

    def _holds(self, trial: Trial) -> bool:
        """A win is checked against the best re-measured right after it (when time allows): on a shared
        machine the load drifts between trials, and a knob must beat the best both before and after."""
        if self._no_time(None):
            return True  # no time to check: the one comparison stands
        again = self._trial(f"{self.best.label} (again)", self.best.settings)
        if not again.ok:
            trial.reason = f"not re-checked ({again.label}: {again.reason})"
            return True
        if beats(trial, again):
            return True
        trial.reason = (
            f"not faster than {self.best.label} re-measured right after it "
            f"({trial.rate:,.0f} vs {again.rate:,.0f} samples/s): the first comparison was noise"
        )
        return False

    def find_largest(self, knobs: dict[str, Any]) -> dict[str, Any] | None:
        """The batch search (torch) at ``knobs``, when time allows; why not in ``largest_failed``."""
        if self._no_time(None):
            self.largest_failed = "budget: no time left for the batch search"
            return None
        self.log("batch search: the largest batch that fits ...")
        watch = Watch(self._walk_deadline(), self.clock)  # its real steps are stopped at the walk's end too
        found, why = None, ""
        with contextlib.suppress(TrialStopped), stop_at_deadline(watch):
            found, why = largest_batch(self.user, knobs)
        if watch.stopped:  # raised through torch, it may come back as the search's own failure
            self.largest_failed = "budget: the batch search was stopped at the walk's deadline"
            return None
        self.largest_failed = f"the batch search failed: {why}"
        return found

    def _walk_deadline(self) -> float:
        """The budget's end less the final re-measure's time (the default's and the best's walls again)."""
        if not self.trials:
            return self.deadline
        default = self.trials[0]
        best = getattr(self, "best", default)
        pair = default.wall_s + (best.wall_s if best is not default else default.wall_s)
        return self.deadline - CONFIRM_MARGIN * pair

    def _no_time(self, cand: Candidate | None) -> str | None:
        now = self.clock()
        left, kept = self._walk_deadline() - now, self.deadline - self._walk_deadline()
        # the quickest trial without compile: the first one also pays the process's one-time start-up
        plain = [t.wall_s for t in self.trials if not t.settings.get("compile")]
        need = min(plain) if plain else 0.0
        if cand is not None and cand.settings.get("compile"):
            done = [t.warmup_s for t in self.trials if t.settings.get("compile") and t.warmup_s]
            need += max(done) if done else self.engine.compile_guess_s
        if left < need:
            total = f"{max(self.deadline - now, 0.0):.0f} s left, {kept:.0f} s of it for the final re-measure"
            return f"budget: {total}; a trial needs {need:.0f} s"
        return None

    def _skip_group(self, group: Group) -> None:
        self.skipped.append({"knob": group.knob, "value": "", "reason": group.reason})
        self.decisions.append(Decision(group.knob, None, False, f"{group.knob}: not tried: {group.reason}."))

    # -- what each knob's trials say -------------------------------------------------------------------
    def _decide(self, group: Group, incumbent: Trial, tried: list) -> Decision:
        winner = next((t for c, t, _ in tried if t is self.best), None)
        old = incumbent.settings.get(group.knob)
        if old is None:
            old = UNSET.get(group.knob, "unset")
        if group.knob == "compile":
            old = incumbent.settings.get("compile_mode") or "default" if old else "off"
        elif group.knob == "precision" and old != incumbent.precision:
            old = f"{old} ({incumbent.precision})"  # auto, as it resolved here
        default = self.default.samples_per_s
        if winner is not None:
            cand = next(c for c, t, _ in tried if t is winner)
            r, lo, hi = ratio(winner.samples_per_s, default)
            text = f"{cand.label.split('=', 1)[1]} over {old}: {r:.2f}x the default ({lo:.2f}-{hi:.2f})"
            if incumbent is not self.default:  # the knob's own step: from the best before it
                text += f", {incumbent.label} before it {ratio(incumbent.samples_per_s, default)[0]:.2f}x"
            text += f" on {self.where}"
            text += self._payback(winner, incumbent) if group.knob == "compile" else ""
            return Decision(group.knob, cand.settings, True, f"{group.knob}: {text}.")
        parts = []
        for cand, trial, why in tried:
            if trial is not None and trial.ok:
                note = f" ({trial.reason})" if trial.reason else ""
                if group.knob == "compile" and trial.warmup_s is not None:
                    note += f" (first step {trial.warmup_s:.1f} s)"
                parts.append(f"{cand.label} {ratio(trial.samples_per_s, default)[0]:.2f}x the default{note}")
            else:
                parts.append(f"{cand.label} {trial.status if trial else 'skipped'} ({why})")
        return Decision(group.knob, None, False, f"{group.knob}: kept {old}: " + "; ".join(parts) + ".")

    def _payback(self, compiled: Trial, eager: Trial) -> str:
        if compiled.warmup_s is None or eager.warmup_s is None:
            return ""
        extra = max(compiled.warmup_s - eager.warmup_s, 0.0)
        b = compiled.batch_size or 1
        saved = b / eager.rate - b / compiled.rate  # seconds per step
        text = f", compile {extra:.0f} s"
        return text + (f", pays back after {math.ceil(extra / saved):,} steps" if saved > 0 else "")

    def _confirm(self, result: TuneResult) -> None:
        """The default and the best once more, back to back: the ratio is then taken from that pair, so
        drift in the machine's load over the search (a shared machine) moves both. A pick that cannot be
        re-measured in the budget, or is not faster there, is undone."""
        best, default = result.best, result.default
        result.compared = (best, default)
        if best is default:
            result.ratio = ratio(best.samples_per_s, default.samples_per_s)
            return
        left = self.deadline - self.clock()
        if left < best.wall_s + default.wall_s:
            self._revert(result, None)
            return
        again_d = self._trial("default (again)", default.settings, deadline=self.deadline)
        again_b = self._trial("tuned (again)", best.settings, deadline=self.deadline)
        if not (again_d.ok and again_b.ok):
            self._revert(result, None)
            return
        result.compared = (again_b, again_d)
        result.ratio_from = "default and tuned re-measured back to back at the end"
        measured = ratio(again_b.samples_per_s, again_d.samples_per_s)
        if measured[0] < 1 + MIN_GAIN:
            self._revert(result, measured[0])  # no speed-up to report
        else:
            result.ratio = measured

    def _revert(self, result: TuneResult, measured: float | None) -> None:
        """The search's pick did not beat the default back to back at the end (``measured``), or could not
        be re-measured in the budget (None): the defaults stand, and each knob's sentence says why."""
        result.reverted = (result.best, measured)
        result.best = result.default
        why = (
            f"the tuned config measured {measured:.2f}x the default back to back at the end"
            if measured is not None
            else "no time was left in the budget to re-measure it against the default"
        )
        for decision in result.decisions:
            if decision.changed:
                decision.changed = False
                decision.sentence = decision.sentence.rstrip(".") + f"; not kept: {why}."
