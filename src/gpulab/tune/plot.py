"""``gpulab tune``'s plot, twice: ``tune.png`` through the bench's plot layer (one bar per measured
trial, samples/s median with its spread as the error bar, the default's median as a dashed line, the
chosen config green, rejected and failed trials red, a trial without figures named without a bar), and a
bar per row of the terminal table (block characters, as a share of the fastest trial, the default's
position marked), so the comparison is seen without opening a file."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from gpulab.measure.plots import Panel, Plot, Series, matplotlib_missing, render
from gpulab.tune.search import TuneResult
from gpulab.tune.trial import Trial

PLOT_FILE = "tune.png"
BAR_CELLS = 10  # the table's bar column: compact, so the table stays within 150 columns
_EIGHTHS = "▏▎▍▌▋▊▉█"  # one to eight eighths of a cell
DEFAULT_MARK = "┆"
# (legend, colour) per kind of trial; the terminal uses the same colours
_KINDS = {"chosen": "tab:green", "accepted": "tab:blue", "rejected / failed": "tab:red"}


def draw(result: TuneResult, out_dir: Path) -> Path | None:
    """Draw ``out_dir/tune.png``; None when matplotlib is missing (``missing()`` says so)."""
    if missing():
        return None
    return render(tune_plot(result), out_dir)


def missing() -> str | None:
    return matplotlib_missing(f"no {PLOT_FILE}")


def tune_plot(result: TuneResult) -> Plot:
    names = [category(i, t) for i, t in enumerate(result.trials, 1)]
    series = {kind: Series(kind, [], [], [], [], color) for kind, color in _KINDS.items()}
    series["chosen"].label = f"chosen: {result.best.label}"
    for name, t in zip(names, result.trials, strict=True):
        if t.samples_per_s is None:
            continue  # on the axis by name, without a bar
        s = series["chosen" if t is result.best else "accepted" if t.ok else "rejected / failed"]
        s.x.append(name)
        s.y.append(t.samples_per_s.value)
        s.low.append(t.samples_per_s.low)
        s.high.append(t.samples_per_s.high)
    default = result.default.samples_per_s
    panel = Panel(
        "samples/s per trial",
        "samples/s (median; error bar: spread of the repeats)",
        "",
        kind="barh",
        series=[s for s in series.values() if s.y],
        hlines=[{"y": default.value, "label": f"default {default.value:,.0f} samples/s"}],
        categories=names,
        grouped=False,
    )
    size = (9.0, 1.5 + 0.4 * max(len(names), 4))  # room for the trials' names, a row each
    return Plot(PLOT_FILE, f"gpulab tune {result.recipe} on {result.device}", [panel], size)


def category(i: int, t: Trial) -> str:
    """The trial's name on the axis: numbered as in the table (a label may repeat: "default (again)")."""
    name = f"{i} {t.label}"
    return name if t.samples_per_s else f"{name} ({t.status}, no figure)"


def speed_bar(t: Trial, fastest: float, default: float, style: str = "", cells: int = BAR_CELLS) -> Text:
    """``t``'s samples/s as a bar of ``cells`` cells where ``fastest`` fills them all; ``DEFAULT_MARK``
    stands where the default's bar ends, wherever this bar does not cover it. "-" without figures."""
    if t.samples_per_s is None or fastest <= 0:
        return Text("-")
    eighths = max(1, round(t.rate / fastest * cells * 8))  # a measured trial always shows a sliver
    full, part = divmod(min(eighths, cells * 8), 8)
    bar = "█" * full + (_EIGHTHS[part - 1] if part else "")
    mark = min(int(default / fastest * cells), cells - 1)
    tail = "".join(DEFAULT_MARK if len(bar) + j == mark else " " for j in range(cells - len(bar)))
    return Text(bar, style=style) + Text(tail, style="dim")
