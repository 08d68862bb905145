"""What ``gpulab tune`` leaves behind: tuned.yaml (a config ``gpulab train --config`` takes as is),
tune.json (every trial, every skipped value and why), tune.png (``tune/plot.py``), and the table (with a
bar per trial) and sentences in the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpulab.artifact.ownership import claim_output_folder
from gpulab.tune import plot
from gpulab.tune.search import TuneResult, vs_default
from gpulab.tune.trial import BUDGET_RAN_OUT, Trial

TUNED_FILE, JSON_FILE = "tuned.yaml", "tune.json"
_STYLE = {"ok": "", "rejected": "red", "failed": "red", "stopped": "yellow"}


def tuned_settings(user: dict[str, Any], result: TuneResult) -> dict[str, Any]:
    """The user's config with the knobs the search changed; run-specific keys (out_dir, resume) dropped."""
    out = {k: v for k, v in user.items() if k not in ("out_dir", "resume", "overwrite")}
    for decision in result.decisions:
        if decision.changed:
            out.update(decision.chosen)
    if out.get("compile") is True and out.get("compile_mode") is None:
        out.pop("compile_mode", None)  # the default mode: nothing to say
    return out


def write_outputs(out_dir: Path, user: dict[str, Any], result: TuneResult) -> tuple[Path, Path, Path | None]:
    """tuned.yaml, tune.json and tune.png (None when matplotlib is missing)."""
    claim_output_folder(out_dir, "tune")  # a folder of the user's is refused, untouched
    png = plot.draw(result, out_dir)
    settings = tuned_settings(user, result)
    header = "\n".join(f"# {line}" for line in summary_lines(result)) + "\n"
    tuned = out_dir / TUNED_FILE
    tuned.write_text(
        f"# gpulab tune {result.recipe} on {result.device}: train with gpulab train --config {tuned}\n"
        + header
        + yaml.safe_dump(settings, sort_keys=False)
    )
    doc = {
        "recipe": result.recipe,
        "engine": result.engine,
        "device": result.device,
        "budget_s": result.budget_s,
        "elapsed_s": round(result.elapsed_s, 1),
        "startup_s": round(result.startup_s, 1),
        "yardstick_s": round(result.yardstick_s, 1),
        "out_of_budget": result.out_of_budget,
        "tolerance": result.tolerance,
        "samples_per_trial": result.samples_per_trial,
        "speedup": _speedup(result),
        "reverted": {"pick": result.reverted[0].label, "measured": result.reverted[1]}  # None: no time
        if result.reverted
        else None,
        "tuned": settings,
        "decisions": [d.__dict__ for d in result.decisions],
        "largest_batch": result.largest,
        "trials": [t.to_json() for t in result.trials],
        "skipped": result.skipped,
        "plot": str(png) if png else None,
    }
    path = out_dir / JSON_FILE
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return tuned, path, png


def _speedup(result: TuneResult) -> dict[str, Any] | None:
    if result.ratio is None:
        return None
    r, lo, hi = result.ratio
    return {"tuned_over_default": r, "low": lo, "high": hi, "from": result.ratio_from}


def summary_lines(result: TuneResult) -> list[str]:
    """The verdict, then one sentence per knob."""
    b, d = result.compared or (result.best, result.default)
    r, lo, hi = vs_default(b, result)  # the table's figure for that trial
    speed = f"default {_fig(d)} samples/s"
    if result.reverted is not None and result.reverted[1] is None:
        pick = result.reverted[0]
        verdict = (
            f"the defaults stand: the search's pick ({pick.label}, {vs_default(pick, result)[0]:.2f}x in "
            f"the search) could not be re-measured against the default in the budget ({speed})"
        )
    elif result.reverted is not None:
        pick, measured = result.reverted
        verdict = (
            f"the defaults stand: the search's pick ({pick.label}) measured {measured:.2f}x the default "
            f"re-measured back to back at the end ({_fig(b)} vs {speed}), within the noise or slower"
        )
    elif result.best is result.default and not _measured_others(result):
        verdict = (
            f"measured only the defaults ({speed}): no other config was measured in the "
            f"{result.budget_s:.0f} s budget ({_why_none(result)}); give a larger --budget"
        )
    elif result.best is result.default:
        verdict = f"the defaults are already the fastest config found: {speed} (measured this session)"
        others = [t for t in result.trials[1:] if t.samples_per_s and not t.label.endswith("(again)")]
        runner_up = max(others, key=lambda t: t.rate, default=None)
        if runner_up is not None:
            r = vs_default(runner_up, result)[0]
            why = f"{runner_up.status}: {runner_up.reason}" if runner_up.reason else runner_up.status
            verdict += f"; the fastest other trial: {runner_up.label} at {r:.2f}x ({why})"
    else:
        verdict = (
            f"tuned {_fig(b)} vs {speed}: {r:.2f}x (spread {lo:.2f}-{hi:.2f}; {result.ratio_from}); "
            f"loss {_num(b.loss)} vs {_num(d.loss)}"
        )
    lines = [verdict]
    lines += [dec.sentence for dec in result.decisions]
    spent = result.startup_s + result.yardstick_s
    if spent > result.budget_s:  # the budget could not hold: say where it went
        lines.append(
            f"over budget before the search began: the start-up took {result.startup_s:.0f} s and the "
            f"warm-up and the default trial, which always run whole, {result.yardstick_s:.0f} s, past the "
            f"{result.budget_s:.0f} s budget; give a larger --budget"
        )
    if result.out_of_budget:
        lines.append(
            f"budget: {result.budget_s:.0f} s left no time for {_cut(result)}; the best found was kept"
        )
    return lines


def _cut(result: TuneResult) -> str:
    """What the budget's end skipped or stopped (its knobs' values, or the knob)."""
    stopped = [f"{t.label} (stopped)" for t in result.trials if t.reason == BUDGET_RAN_OUT]
    skipped = [s["value"] or s["knob"] for s in result.skipped if s["reason"].startswith("budget")]
    return ", ".join(stopped + skipped) or "more trials"


def _measured_others(result: TuneResult) -> list:
    """The trials of another config than the default's that were measured (a speed to compare)."""
    return [t for t in result.trials[1:] if t.samples_per_s and t.settings != result.default.settings]


def _why_none(result: TuneResult) -> str:
    """Why nothing but the default was measured: the first trial's or skip's reason."""
    for trial in result.trials[1:]:
        if trial.settings != result.default.settings:
            return f"{trial.label} {trial.status}: {trial.reason}"
    skips = [s for s in result.skipped if s.get("reason")]
    skips.sort(key=lambda s: not s["reason"].startswith("budget"))  # the budget's reason first
    return f"{skips[0]['knob']}: {skips[0]['reason']}" if skips else "no trial ran"


def print_report(
    console: Console, result: TuneResult, tuned: Path, json_path: Path, png: Path | None = None
) -> None:
    table = Table(
        title=f"gpulab tune {result.recipe} on {result.device}",
        title_justify="left",
        caption=f"speed: samples/s as a share of the fastest trial's; {plot.DEFAULT_MARK}: the default's",
        caption_justify="left",
    )
    for name, justify in [
        ("#", "right"),
        ("trial", "left"),
        ("batch", "right"),
        ("samples/s", "right"),
        ("spread", "right"),
        ("vs default", "right"),
        ("speed", "left"),
        ("peak MiB", "right"),
        ("loss", "right"),
        ("warm-up s", "right"),
        ("verdict", "left"),
    ]:
        # the bars never wrap: rich narrows the other columns (the verdict folds) instead
        bars = name == "speed"
        table.add_column(
            name, justify=justify, overflow="fold", no_wrap=bars, min_width=plot.BAR_CELLS if bars else None
        )
    fastest = max(t.rate for t in result.trials)
    for i, t in enumerate(result.trials, 1):
        vs = f"{vs_default(t, result)[0]:.2f}x" if t.samples_per_s else "-"
        verdict = "best" if t is result.best else t.status
        table.add_row(
            str(i),
            Text(t.label),
            str(t.batch_size or "-"),
            _fig(t),
            _spread(t) if t.samples_per_s else "-",
            vs,
            plot.speed_bar(t, fastest, result.default.rate, _bar_style(t, result)),
            _num(t.peak_memory_mib, ".0f"),
            _num(t.loss),
            _num(t.warmup_s, ".1f"),
            Text(verdict, style=_STYLE.get(t.status, "")) + Text(f" {t.reason}" if t.reason else ""),
        )
    console.print(table)
    for line in summary_lines(result):
        console.print(line, markup=False, highlight=False)
    busy = [t.cpu_used_by_others for t in result.trials if t.cpu_used_by_others]
    if busy and max(busy) > 0.25:
        console.print(
            f"note: other processes used up to {max(busy):.0%} of the CPU during the trials: "
            "the figures are noisy",
            markup=False,
        )
    if png is None:
        console.print(plot.missing() or f"no {plot.PLOT_FILE}", markup=False, highlight=False)
    files = f"{tuned}, {json_path} and {png}" if png else f"{tuned} and {json_path}"
    console.print(f"wrote {files} ({result.elapsed_s:.0f} s of a {result.budget_s:.0f} s budget)")


def _bar_style(t: Trial, result: TuneResult) -> str:
    return "green" if t is result.best else _STYLE.get(t.status, "")


def _fig(t: Trial) -> str:
    return f"{t.samples_per_s.value:,.0f}" if t.samples_per_s else "-"


def _spread(t: Trial) -> str:
    f = t.samples_per_s
    return f"{f.low:,.0f}-{f.high:,.0f}"


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)
