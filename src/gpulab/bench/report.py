"""``report.html``: one self-contained page (styles inline, PNGs embedded as base64) per bench run.

Sections: the run's settings and environment, then one section per suite with its notes, its table
(every figure as median with its spread and repeats) and its plots. It opens in any browser, offline.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path
from typing import Any

from gpulab.bench.versus import speed_ratio
from gpulab.engine_registry import DEFAULT

REPORT_FILE = "report.html"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2rem; }
h2 { border-bottom: 2px solid #446; padding-bottom: 0.2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #bbc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #e8e8f0; } tr:nth-child(even) td { background: #f7f7fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.details { font-size: 0.8rem; color: #444; } .results { max-width: 100%; }
.spread { color: #667; font-size: 0.8em; } .error { color: #b00; font-weight: bold; }
.notes li { margin: 0.2rem 0; } img { max-width: 100%; border: 1px solid #ddd; margin: 0.5rem 0; }
.meta { color: #555; } pre { white-space: pre-wrap; font-size: 0.8rem; background: #f4f4f4; padding: 0.5rem; }
"""


def write_report(doc: dict[str, Any], out_dir: Path) -> Path:
    """Write ``out_dir/report.html`` from a results document and the PNGs beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / REPORT_FILE
    path.write_text(render_html(doc, out_dir), encoding="utf-8")
    return path


def render_html(doc: dict[str, Any], out_dir: Path) -> str:
    config, env = doc.get("config", {}), doc.get("environment", {})
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpulab bench {escape(str(doc.get('created', '')))}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>gpulab bench</h1>",
        f'<p class="meta">{escape(str(doc.get("created", "")))} &middot; device '
        f"{escape(str(config.get('device')))} ({escape(str(env.get('device_name')))}) &middot; profile "
        f"{escape(str(config.get('profile')))} &middot; results schema {doc.get('schema_version')}</p>",
        "<p>Every figure is the median of its repeats; the small print under it is the spread "
        "(interquartile range from 4 repeats up, min..max below that) and the number of repeats.</p>",
        _contents(doc),
        _comparison(doc, out_dir),
        '<h2 id="environment">Environment</h2>',
        _key_values({**{f"config.{k}": v for k, v in config.items()}, **env}),
    ]
    for name, suite in doc.get("suites", {}).items():
        parts.append(_suite(name, suite, out_dir))
    parts.append("</body></html>")
    return "\n".join(parts)


def _contents(doc: dict[str, Any]) -> str:
    items = [
        f'<li><a href="#suite-{escape(name)}">{escape(suite.get("title", name))}</a> '
        f"({escape(suite.get('status', '?'))}, {suite.get('seconds', 0):.1f} s)</li>"
        for name, suite in doc.get("suites", {}).items()
    ]
    return "<ul>" + "".join(items) + "</ul>"


_SIDES = (("time", "time (ms)"), ("throughput", "throughput"), ("peak_memory", "peak memory (MiB)"))


def _comparison(doc: dict[str, Any], out_dir: Path) -> str:
    """Two engines side by side (``doc["comparison"]``, from ``bench.versus``: what it says of each engine,
    the rows) and the suites skipped."""
    skipped = doc.get("skipped") or []
    comparison = doc.get("comparison")
    if comparison is None and not skipped:
        return ""
    sides = (comparison or {}).get("engines") or {}
    title = " vs ".join(side["framework"] for side in sides.values()) or "Suites skipped"
    parts = [f'<section id="comparison"><h2>{escape(title)}</h2>']
    if comparison is not None:
        speedups = " and ".join(f"{s['compile_speedup']} ({s['framework']})" for s in sides.values())
        parts.append(
            "<p>The same workloads on both engines. Throughput is samples/s for training steps, TFLOP/s for "
            f"matmul; compile speed-up is {escape(speedups)}; n/a: the engine does not give the figure here "
            "(the row's reason on hover).</p>"
        )
        parts.append(_comparison_table(comparison["rows"], sides))
        for plot in comparison.get("plots") or []:
            parts.append(_image(plot, out_dir))
    parts += [f"<p>{escape(s['reason'])}</p>" for s in skipped]
    parts.append("</section>")
    return "\n".join(parts)


def _comparison_table(rows: list[dict[str, Any]], sides: dict[str, dict[str, str]]) -> str:
    if not rows:
        return "<p>No workload was measured on both engines.</p>"
    (a, a_name), (b, b_name) = ((name, escape(side["framework"])) for name, side in sides.items())
    head = "<th>workload</th><th>throughput unit</th>"
    for _, title in (*_SIDES, ("compile_speedup", "compile speed-up (x)")):
        head += f"<th>{a_name} {escape(title)}</th><th>{b_name} {escape(title)}</th>"
    head += f"<th>{b_name} speed vs {a_name} (x)</th>"
    body = []
    for row in rows:
        unit = (row[a].get("throughput") or row[b].get("throughput") or {}).get("unit", "")
        cells = [f"<td>{escape(row['workload'])}</td>", f"<td>{escape(unit)}</td>"]
        for field, _ in (*_SIDES, ("compile_speedup", "")):
            for engine in (a, b):
                side = row[engine]
                fig = side.get(field)
                if fig is None:
                    why = side.get("no_peak_memory", "") if field == "peak_memory" else "not in this suite"
                    cells.append(f'<td class="num" title="{escape(why)}">n/a</td>')
                else:
                    cells.append(_figure_cell(fig))
        ratio = speed_ratio(row, a, b)
        cells.append(f'<td class="num">{format_number(ratio and ratio["value"])}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="results versus"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _key_values(values: dict[str, Any]) -> str:
    rows = [f"<tr><th>{escape(str(k))}</th><td>{escape(_text(v))}</td></tr>" for k, v in values.items()]
    return '<table class="environment">' + "".join(rows) + "</table>"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _suite(name: str, suite: dict[str, Any], out_dir: Path) -> str:
    status = suite.get("status", "?")
    parts = [
        f'<section id="suite-{escape(name)}" data-suite="{escape(name)}">',
        f"<h2>{escape(suite.get('title', name))} <small>({escape(name)}, "
        f"{escape(suite.get('engine', DEFAULT))})</small></h2>",  # older results: torch's
        f"<p>{escape(suite.get('description', ''))}</p>",
        f'<p class="meta{" error" if status != "ok" else ""}">status {escape(status)}, '
        f"{suite.get('seconds', 0):.1f} s</p>",
    ]
    notes = suite.get("notes") or []
    if notes:
        parts.append('<ul class="notes">')
        parts += [f"<li>{_note(n)}</li>" for n in notes]
        parts.append("</ul>")
    parts.append(_table(suite.get("rows") or []))
    for plot in suite.get("plots") or []:
        parts.append(_image(plot, out_dir))
    parts.append("</section>")
    return "\n".join(parts)


def _note(note: str) -> str:
    return f"<pre>{escape(note)}</pre>" if "\n" in note else escape(note)


def _table(rows: list[dict[str, Any]]) -> str:
    """Keys, one column per figure (its unit in the header), and the rows' other facts in one "details"
    column: a column per fact made the precision table twice as wide as the page."""
    if not rows:
        return "<p>No rows.</p>"
    keys = _columns(rows, "key")
    figures = _columns(rows, "figures")
    units = {f: next(r["figures"][f]["unit"] for r in rows if f in r["figures"]) for f in figures}
    head = "".join(f"<th>{escape(label(c))}</th>" for c in keys)
    head += "".join(f"<th>{escape(figure_header(c, units[c]))}</th>" for c in figures)
    has_info = any(row.get("info") for row in rows)
    head += "<th>details</th>" if has_info else ""
    body = []
    for row in rows:
        cells = [f"<td>{escape(_plain(row['key'].get(c)))}</td>" for c in keys]
        cells += [_figure_cell(row["figures"].get(c)) for c in figures]
        if has_info:
            facts = [f"{escape(label(k))}: {escape(_plain(v))}" for k, v in (row.get("info") or {}).items()]
            cells.append(f'<td class="details">{"<br>".join(facts)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def label(name: str) -> str:
    """A key as a person reads it: ``size_mib`` -> ``size (MiB)``, ``loss_before`` -> ``loss before``."""
    return name.replace("_mib", " (MiB)").replace("_", " ")


def figure_header(figure: str, unit: str) -> str:
    """``samples_per_s`` in samples/s -> ``samples/s``; ``step_time`` in ms -> ``step time (ms)``."""
    name = label(figure.replace("_per_", "/"))
    return name if unit.lower() in name.lower() else f"{name} ({unit})"


def _columns(rows: list[dict[str, Any]], part: str) -> list[str]:
    return list(dict.fromkeys(c for row in rows for c in row.get(part, {})))


def _figure_cell(fig: dict[str, Any] | None) -> str:
    """The median (its unit is in the header), and under it the spread, which may wrap."""
    if fig is None:
        return '<td class="num">&ndash;</td>'
    spread = (
        f"{fig['spread']} {format_number(fig['low'])}&ndash;{format_number(fig['high'])}, "
        if fig["spread"] != "none"
        else ""
    )
    return (
        f'<td class="num">{format_number(fig["value"])}<br>'
        f'<span class="spread">{spread}n={fig["repeats"]}</span></td>'
    )


def format_number(x: Any) -> str:
    """Three significant figures, thousands separated; '-' for a missing value."""
    if x is None:
        return "-"
    x = float(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    return f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.2e}"


def _plain(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def _image(plot: dict[str, Any], out_dir: Path) -> str:
    path = out_dir / plot["file"]
    title = escape(plot.get("title", plot["file"]))
    if not path.is_file():
        return f'<p class="error">plot {escape(plot["file"])} was not drawn</p>'
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    image = f'<img alt="{title}" src="data:image/png;base64,{data}">'
    return f"<figure>{image}<figcaption>{title}</figcaption></figure>"
