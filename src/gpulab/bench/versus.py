"""Two engines on the same workloads (the first two of ``--engine``, torch against TensorFlow): the
``comparison`` section of results.json, its plot and its table in report.html.

Suite ``S`` of one engine and of the other (named with each engine's ``bench_prefix``: ``S``, ``tf-S``) use
the same row keys (model and precision, dtype and size, batch, k), so rows pair by key; the compile suite
pairs each engine's uncompiled variant, and its compiler's default, by their place (``bench_compile``).
Each pair gives, per engine: time (a step, or a matmul product), throughput (samples/s, or TFLOP/s), peak
memory (or why there is none) and the compile speed-up over the uncompiled step (``bench_speedup``). What
the report needs of each engine (its framework's name, its speed-up in words) is in the section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulab import engine_registry as engines
from gpulab.measure.plots import Panel, Plot, Series, matplotlib_missing, render

TIME, THROUGHPUT = ("step_time", "time"), ("samples_per_s", "tflops")


def comparison_rows(doc: dict[str, Any], pair: tuple[str, str]) -> list[dict[str, Any]]:
    """One entry per workload both engines of ``pair`` measured: ``{"suite", "workload", A: {...}, B:
    {...}}``, each side ``{"time", "throughput", "peak_memory", "compile_speedup"}`` (figures or None) plus
    ``"no_peak_memory"`` (why) where it has none."""
    a, b = pair
    bench_a, bench_b = (engines.capability(engines.get(name), "bench") for name in pair)
    suites = doc.get("suites", {})
    variants = dict(zip(bench_a.compile, bench_b.compile, strict=True))  # a's variant -> b's
    out = []
    for full, suite in suites.items():
        if suite.get("engine") != a or not full.startswith(bench_a.prefix):
            continue
        name = full.removeprefix(bench_a.prefix)
        other_suite = suites.get(bench_b.prefix + name)
        if not other_suite:
            continue
        other_rows = {_key(r["key"]): r for r in other_suite["rows"]}
        for row in suite["rows"]:
            key = dict(row["key"])
            if name == "compile":
                key["variant"] = variants.get(key["variant"], key["variant"])
            other = other_rows.get(_key(key))
            if other is None or not (row["figures"] and other["figures"]):
                continue
            label = f"{name}: " + " ".join(str(v) for v in row["key"].values())
            if name == "compile":
                label += f" / {key['variant']}"
            out.append({"suite": name, "workload": label, a: _side(row, bench_a), b: _side(other, bench_b)})
    return out


def _key(key: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in key.items()))


def _side(row: dict[str, Any], bench: Any) -> dict[str, Any]:
    figures = row["figures"]
    side = {
        "time": next((figures[f] for f in TIME if f in figures), None),
        "throughput": next((figures[f] for f in THROUGHPUT if f in figures), None),
        "peak_memory": figures.get("peak_memory"),
        "compile_speedup": figures.get(bench.speedup[0]),
    }
    if side["peak_memory"] is None:
        side["no_peak_memory"] = row["info"].get("no_peak_memory", "not measured by this suite")
    return side


def add_comparison(doc: dict[str, Any], out: Path, pair: tuple[str, str]) -> None:
    """``doc["comparison"]``: the engines of ``pair`` (each its framework's name and its compile speed-up in
    words), the paired rows and the side-by-side plot (drawn when matplotlib is here)."""
    rows = comparison_rows(doc, pair)
    sides = {
        e.name: {"framework": e.framework, "compile_speedup": engines.capability(e, "bench").speedup[1]}
        for e in map(engines.get, pair)
    }
    doc["comparison"] = {"engines": sides, "rows": rows, "plots": []}
    if matplotlib_missing():
        return
    for suite in dict.fromkeys(r["suite"] for r in rows):  # one plot a suite: 20+ bars in one are unreadable
        plot = _plot([r for r in rows if r["suite"] == suite], suite, sides)
        render(plot, out)
        doc["comparison"]["plots"].append({"file": plot.file, "title": plot.title})


def _plot(rows: list[dict[str, Any]], suite: str, sides: dict[str, dict[str, str]]) -> Plot:
    (a, a_name), (b, b_name) = ((name, side["framework"]) for name, side in sides.items())
    unit = "ms per product" if suite == "matmul" else "ms per step"
    time = Panel("Time", "workload", unit, kind="bar", yscale="log")
    for engine in (a, b):
        time.series.append(_series(rows, engine, lambda r, e=engine: r[e]["time"]))
    ratio = Panel(f"{b_name} speed relative to {a_name} (>1: {b_name} faster)", "workload", "x", kind="bar")
    ratio.yscale = "log"
    ratio.series.append(_series(rows, f"{a_name} time / {b_name} time", lambda r: speed_ratio(r, a, b)))
    ratio.hlines.append({"y": 1.0, "label": "same speed"})
    title = f"{suite}: {a_name} vs {b_name}, same workloads (median, spread of repeats)"
    return Plot(f"versus-{suite}.png", title, [time, ratio])


def speed_ratio(row: dict[str, Any], a: str, b: str) -> dict[str, float] | None:
    """How many times faster ``b`` ran the row's workload than ``a`` (a's time over b's), with its bounds."""
    a, b = row[a]["time"], row[b]["time"]
    if not a or not b or not b["value"]:
        return None
    return {"value": a["value"] / b["value"], "low": a["low"] / b["high"], "high": a["high"] / b["low"]}


def _series(rows: list[dict[str, Any]], label: str, pick: Any) -> Series:
    points = [(r["workload"].split(": ", 1)[1], pick(r)) for r in rows]  # the suite is in the title
    points = [(x, f) for x, f in points if f and f.get("value") is not None]
    return Series(
        label,
        [x for x, _ in points],
        [f["value"] for _, f in points],
        [f["low"] for _, f in points],
        [f["high"] for _, f in points],
    )
