"""Plots as data (``Plot`` of ``Panel``s of ``Series``), drawn to PNG with matplotlib.

Suites describe what to plot; only ``render`` touches matplotlib, through its object API (no pyplot
global state, no display needed). Every point carries its spread, drawn as an error bar, so a plot
shows the noise of what it plots. The specs are stored in results.json too, so a plot can be redrawn.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.measure.results import Row


@dataclass
class Series:
    label: str
    x: list[Any]  # numbers for a line panel, category names for a bar panel
    y: list[float]
    low: list[float]
    high: list[float]
    color: str | None = None  # None: matplotlib's next colour


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    kind: str = "line"  # line | bar | barh (bars along y: room for long category names)
    series: list[Series] = field(default_factory=list)
    xscale: str = "linear"  # linear | log2
    yscale: str = "linear"  # linear | log
    hlines: list[dict[str, Any]] = field(default_factory=list)  # {"y": float, "label": str}
    marks: list[dict[str, Any]] = field(default_factory=list)  # {"x": value, "label": str}
    # Bar panels: the category order, names without a bar included (None: as the series list them), and
    # grouped=False when the series hold disjoint categories (each bar then takes its whole slot).
    categories: list[Any] | None = None
    grouped: bool = True


@dataclass
class Plot:
    file: str  # a file name inside the output directory
    title: str
    panels: list[Panel] = field(default_factory=list)
    size: tuple[float, float] | None = None  # inches; None: 6.4 wide per panel, 4.4 high
    note: str = ""  # under the panels: what the plot leaves out, and why


def series_from_rows(
    rows: Iterable[Row],
    label: str,
    x: str | Callable[[Row], Any],
    figure: str,
    *,
    where: Callable[[Row], bool] = lambda r: True,
) -> Series:
    """One series: ``row.key[x]`` (or ``x(row)``) against ``row.figures[figure]``, value and spread,
    for the rows ``where`` accepts that have that figure."""
    x_of = x if callable(x) else (lambda r: r.key[x])
    points = [(x_of(r), r.figures[figure]) for r in rows if where(r) and r.figures.get(figure)]
    return Series(
        label=label,
        x=[px for px, _ in points],
        y=[f.value for _, f in points],
        low=[f.low for _, f in points],
        high=[f.high for _, f in points],
    )


def render(plot: Plot, out_dir: Path) -> Path:
    """Draw ``plot`` to ``out_dir / plot.file`` (PNG) and return the path."""
    fig = figure(plot)
    path = out_dir / plot.file
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def figure(plot: Plot) -> Any:
    """``plot`` as a matplotlib Figure (not saved)."""
    from matplotlib.figure import Figure

    panels = [p for p in plot.panels if any(s.y for s in p.series)] or plot.panels[:1]
    fig = Figure(figsize=plot.size or (6.4 * len(panels), 4.4), dpi=100, layout="constrained")
    if len(panels) > 1:
        fig.suptitle(plot.title)
    if plot.note:
        fig.supxlabel(textwrap.fill(plot.note, 110), fontsize="small", color="tab:red")
    for ax, panel in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        _DRAW[panel.kind](ax, panel)
        for line in panel.hlines:  # on a barh panel the value axis is x: the line stands upright
            draw = ax.axvline if panel.kind == "barh" else ax.axhline
            draw(line["y"], color="grey", linestyle="--", linewidth=1, label=line.get("label"))
        # One panel: the plot's title above the panel's, both over the axes (a figure title is centred on
        # the figure, off the axes' centre by the width of long category names on the left)
        ax.set_title(panel.title if len(panels) > 1 else f"{plot.title}\n{panel.title}")
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        if panel.yscale == "log":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    return fig


def _errors(s: Series) -> list[list[float]]:
    # matplotlib wants distances below and above each point, never negative.
    below = [max(0.0, y - lo) for y, lo in zip(s.y, s.low, strict=True)]
    above = [max(0.0, hi - y) for y, hi in zip(s.y, s.high, strict=True)]
    return [below, above]


def _draw_line(ax: Any, panel: Panel) -> None:
    for s in panel.series:
        if s.y:
            ax.errorbar(
                s.x, s.y, yerr=_errors(s), marker="o", markersize=4, capsize=3, label=s.label, color=s.color
            )
    if panel.xscale == "log2":
        ax.set_xscale("log", base=2)
    for mark in panel.marks:
        ax.axvline(mark["x"], color="tab:red", linestyle=":", linewidth=1.5, label=mark.get("label"))


def _draw_bar(ax: Any, panel: Panel) -> None:
    categories: list[Any] = list(panel.categories or [])
    for s in panel.series:
        categories += [x for x in s.x if x not in categories]
    n = max(1, len(panel.series)) if panel.grouped else 1
    width = 0.8 / n
    labelled = len(panel.series) > 1
    for i, s in enumerate(panel.series):
        slot = i if panel.grouped else 0
        xs = [categories.index(x) - 0.4 + width * (slot + 0.5) for x in s.x]
        style = {"capsize": 3, "label": s.label if labelled else None, "color": s.color}
        if panel.kind == "barh":
            ax.barh(xs, s.y, height=width, xerr=_errors(s), **style)
        else:
            ax.bar(xs, s.y, width=width, yerr=_errors(s), **style)
    names = [str(c) for c in categories]
    # every category in view, a name without a bar included (matplotlib fits only what was drawn)
    (ax.set_ylim if panel.kind == "barh" else ax.set_xlim)(-0.5, len(categories) - 0.5)
    if panel.kind == "barh":
        ax.set_yticks(range(len(categories)), names)
        ax.invert_yaxis()  # the first category on top, as a table reads
        return
    ax.set_xticks(range(len(categories)))
    room = _chars_per_category(ax, len(categories))
    wrapped = [textwrap.fill(name, room, break_long_words=False) for name in names]
    if (
        all(len(line) <= room for name in wrapped for line in name.splitlines())
        and max((name.count("\n") for name in wrapped), default=0) < 3
    ):
        ax.set_xticklabels(wrapped)
        return
    # names too long to wrap under their bars: tilted, each ending under its own bar
    ax.set_xticklabels(names, rotation=35, ha="right", rotation_mode="anchor")


def _chars_per_category(ax: Any, count: int) -> int:
    """About how many characters of a tick label fit under one category of ``ax``'s panel (the panels
    share the figure's width, of which the axes take about 3/4; a 10-point character is up to 8 pixels wide
    at 100 dpi)."""
    figure = ax.get_figure()
    panel_inches = figure.get_size_inches()[0] / max(1, len(figure.axes))
    return max(4, int(0.75 * panel_inches * figure.dpi / 8 / max(1, count)))


_DRAW: dict[str, Callable[[Any, Panel], None]] = {
    "line": _draw_line,
    "bar": _draw_bar,
    "barh": _draw_bar,
}


def matplotlib_missing(without: str = "results and report have no plots") -> str | None:
    """Why plots cannot be drawn here (``without``: what goes without them), or None when they can."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"matplotlib is not installed (pip install matplotlib): {without}"
    return None
