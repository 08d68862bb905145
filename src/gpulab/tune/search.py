"""The search: the default config first, then one knob at a time on top of the best so far (greedy,
cheap knobs first, compile last since each compile trial pays its compile), under a time budget. The
knobs and their order are the engine's (``engines.py``); the walk is the same on both.

A trial only becomes the best when it is accepted (it ran, its loss is finite and not worse than the
default's at the same samples by more than ``tolerance``) and its median samples/s beats the best's by
more than ``MIN_GAIN``: a fast config that diverges is never chosen, and noise does not pick a knob.
Pruning: a batch that did not fit rules out larger ones at the same precision; a compile mode that
failed rules out the other modes. When the budget runs out, the best so far stands; with time left, the
default and the best are measured once more, back to back, and the ratio comes from that pair; a pick
that is not faster there is undone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpulab.engines import DEFAULT
from gpulab.errors import ConfigError
from gpulab.measure.knobs import Candidate, Group
from gpulab.measure.results import Figure
from gpulab.tune.trial import INTERVALS, Trial, engine_for, largest_batch, run_trial

MIN_GAIN = 0.03  # a knob must beat the best by more than this to be chosen (see ``beats``)
MIN_INTERVAL_S = 0.2  # the shortest repeat worth timing (see ``trial_samples``)
TRIAL_SHARE = 8  # a trial lengthened for timing lasts at most budget / TRIAL_SHARE
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
    reverted: tuple[Trial, float] | None = None  # the pick the final re-measure undid, and its ratio
    engine: str = DEFAULT


def ratio(a: Figure, b: Figure) -> tuple[float, float, float]:
    """a/b as (median ratio, worst case, best case) from the two figures' spreads."""
    return a.value / b.value, a.low / b.high, a.high / b.low


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
    but not so many that a trial would last over ``max_s`` (a share of the budget)."""
    if not rate:
        return steps * batch
    per_interval = math.ceil(min_interval_s * rate / batch)
    cap = max_s * rate / (batch * (1 + INTERVALS))  # steps per interval that fill max_s
    per_interval = min(per_interval, int(cap)) if math.isfinite(cap) else per_interval
    return max(steps, 1 + INTERVALS * max(1, per_interval)) * batch


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
    ) -> None:
        if budget_s <= 0:
            raise ConfigError(f"--budget must be a positive number of seconds, got {budget_s}")
        if not 0 <= tolerance < 10:
            raise ConfigError(f"--tolerance is a fraction of the default's loss (e.g. 0.1), got {tolerance}")
        self.user, self.budget_s, self.tolerance, self.steps = user, budget_s, tolerance, steps
        self.log, self.min_interval_s = log, min_interval_s
        self.engine = engine_for(user)
        self.largest: dict[str, Any] | None = None  # the batch search's outcome (torch)
        self.largest_failed = ""
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
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
        self.log("warm-up: a short fit of the default config, not measured ...")
        warm = run_trial(self.user, knobs, samples=0, deadline=math.inf, label="warm-up")
        batch, share = int(knobs["batch_size"]), self.budget_s / TRIAL_SHARE
        self.samples = trial_samples(self.steps, batch, warm.rate, self.min_interval_s, share)
        default = self._trial("default", knobs, deadline=math.inf)  # the yardstick always runs whole
        if not default.ok:
            raise ConfigError(
                f"the default config does not train, so there is nothing to compare: {default.reason}"
            )
        self.default = self.best = default
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
        )
        self._confirm(result)
        result.elapsed_s = time.monotonic() - self.start
        result.out_of_budget = any(s["reason"].startswith("budget") for s in self.skipped) or any(
            t.status == "stopped" for t in self.trials
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
        deadline = self.deadline if deadline is None else deadline
        trial = run_trial(self.user, settings, samples=self.samples, deadline=deadline, label=label)
        if self.trials:
            guard(trial, self.default, self.tolerance)
        self.trials.append(trial)
        speed = f"{trial.samples_per_s.value:,.0f} samples/s" if trial.samples_per_s else "-"
        self.log(
            f"  {trial.status}: {speed}, loss {trial.loss}, {trial.wall_s:.1f} s {trial.reason}".rstrip()
        )
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
        found, why = largest_batch(self.user, knobs)
        self.largest_failed = f"the batch search failed: {why}"
        return found

    def _no_time(self, cand: Candidate | None) -> str | None:
        left = self.deadline - time.monotonic()
        # the quickest trial without compile: the first one also pays the process's one-time start-up
        plain = [t.wall_s for t in self.trials if not t.settings.get("compile")]
        need = min(plain) if plain else 0.0
        if cand is not None and cand.settings.get("compile"):
            done = [t.warmup_s for t in self.trials if t.settings.get("compile") and t.warmup_s]
            need += max(done) if done else self.engine.compile_guess_s
        if left < need:
            return f"budget: {left:.0f} s left, a trial needs about {need:.0f} s"
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
        if winner is not None:
            cand = next(c for c, t, _ in tried if t is winner)
            r, lo, hi = ratio(winner.samples_per_s, incumbent.samples_per_s)
            text = f"{cand.label.split('=', 1)[1]} over {old}: {r:.2f}x ({lo:.2f}-{hi:.2f}) on {self.where}"
            text += self._payback(winner, incumbent) if group.knob == "compile" else ""
            return Decision(group.knob, cand.settings, True, f"{group.knob}: {text}.")
        parts = []
        for cand, trial, why in tried:
            if trial is not None and trial.ok:
                note = f" ({trial.reason})" if trial.reason else ""
                if group.knob == "compile" and trial.warmup_s is not None:
                    note += f" (first step {trial.warmup_s:.1f} s)"
                parts.append(
                    f"{cand.label} {ratio(trial.samples_per_s, incumbent.samples_per_s)[0]:.2f}x{note}"
                )
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
        """The default and the best once more, back to back, when time is left: the ratio is then taken
        from that pair, so drift in the machine's load over the search (a shared machine) moves both."""
        best, default = result.best, result.default
        ratio_of = ratio(best.samples_per_s, default.samples_per_s)
        result.compared = (best, default)
        left = self.deadline - time.monotonic()
        if best is not default and left > 1.2 * (best.wall_s + default.wall_s):
            again_d = self._trial("default (again)", default.settings)
            again_b = self._trial("tuned (again)", best.settings)
            if again_d.ok and again_b.ok:
                ratio_of = ratio(again_b.samples_per_s, again_d.samples_per_s)
                result.compared = (again_b, again_d)
                result.ratio_from = "default and tuned re-measured back to back at the end"
                if ratio_of[0] < 1 + MIN_GAIN:
                    self._revert(result, ratio_of[0])
                    return
        result.ratio = ratio_of

    def _revert(self, result: TuneResult, measured: float) -> None:
        """The search's pick did not beat the default back to back at the end: the defaults stand, and
        each knob's sentence says its win did not hold."""
        result.reverted = (result.best, measured)
        result.best = result.default
        for decision in result.decisions:
            if decision.changed:
                decision.changed = False
                decision.sentence = decision.sentence.rstrip(".") + (
                    f"; not kept: the tuned config measured {measured:.2f}x the default back to back "
                    "at the end."
                )
