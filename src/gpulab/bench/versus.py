"""PyTorch against TensorFlow on the same workloads: the ``comparison`` section of results.json, its plot and
its table in report.html.

A torch suite ``S`` and its TensorFlow side ``tf-S`` use the same row keys (model and precision, dtype and
size, batch, k), so rows pair by key; the compile suite pairs eager with tf.function and torch.compile with
XLA. Each pair gives, per engine: time (a step, or a matmul product), throughput (samples/s, or TFLOP/s),
peak memory (or why there is none) and the compile speed-up over the uncompiled step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpulab.engines.tensorflow.bench import TF_PREFIX, TF_SUITES
from gpulab.measure.plots import Panel, Plot, Series, matplotlib_missing, render

ENGINES = ("torch", "tensorflow")
# compile: torch's variant -> TensorFlow's counterpart (the uncompiled baseline, the compiler's default).
COMPILE_PAIRS = {"eager": "graph", "default": "xla"}
TIME, THROUGHPUT = ("step_time", "time"), ("samples_per_s", "tflops")
SPEEDUP = {"torch": "speedup_vs_eager", "tensorflow": "speedup_vs_graph"}


def comparison_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per workload both engines measured: ``{"suite", "workload", "torch": {...}, "tensorflow":
    {...}}``, each side ``{"time", "throughput", "peak_memory", "compile_speedup"}`` (figures or None) plus
    ``"no_peak_memory"`` (why) where it has none."""
    suites = doc.get("suites", {})
    out = []
    for name in TF_SUITES:
        torch_suite, tf_suite = suites.get(name), suites.get(TF_PREFIX + name)
        if not torch_suite or not tf_suite:
            continue
        tf_rows = {_key(r["key"]): r for r in tf_suite["rows"]}
        for row in torch_suite["rows"]:
            key = dict(row["key"])
            if name == "compile":
                key["variant"] = COMPILE_PAIRS.get(key["variant"], key["variant"])
            other = tf_rows.get(_key(key))
            if other is None or not (row["figures"] and other["figures"]):
                continue
            label = f"{name}: " + " ".join(str(v) for v in row["key"].values())
            if name == "compile":
                label += f" / {key['variant']}"
            out.append(
                {
                    "suite": name,
                    "workload": label,
                    "torch": _side(row, "torch"),
                    "tensorflow": _side(other, "tensorflow"),
                }
            )
    return out


def _key(key: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in key.items()))


def _side(row: dict[str, Any], engine: str) -> dict[str, Any]:
    figures = row["figures"]
    side = {
        "time": next((figures[f] for f in TIME if f in figures), None),
        "throughput": next((figures[f] for f in THROUGHPUT if f in figures), None),
        "peak_memory": figures.get("peak_memory"),
        "compile_speedup": figures.get(SPEEDUP[engine]),
    }
    if side["peak_memory"] is None:
        side["no_peak_memory"] = row["info"].get("no_peak_memory", "not measured by this suite")
    return side


def add_comparison(doc: dict[str, Any], out: Path) -> None:
    """``doc["comparison"]``: the paired rows and the side-by-side plot (drawn when matplotlib is here)."""
    rows = comparison_rows(doc)
    doc["comparison"] = {"rows": rows, "plots": []}
    if matplotlib_missing():
        return
    for suite in dict.fromkeys(r["suite"] for r in rows):  # one plot a suite: 20+ bars in one are unreadable
        plot = _plot([r for r in rows if r["suite"] == suite], suite)
        render(plot, out)
        doc["comparison"]["plots"].append({"file": plot.file, "title": plot.title})


def _plot(rows: list[dict[str, Any]], suite: str) -> Plot:
    unit = "ms per product" if suite == "matmul" else "ms per step"
    time = Panel("Time", "workload", unit, kind="bar", yscale="log")
    for engine in ENGINES:
        time.series.append(_series(rows, engine, lambda r, e=engine: r[e]["time"]))
    ratio = Panel("TensorFlow speed relative to PyTorch (>1: TensorFlow faster)", "workload", "x", kind="bar")
    ratio.yscale = "log"
    ratio.series.append(_series(rows, "PyTorch time / TensorFlow time", _speed_ratio))
    ratio.hlines.append({"y": 1.0, "label": "same speed"})
    title = f"{suite}: PyTorch vs TensorFlow, same workloads (median, spread of repeats)"
    return Plot(f"versus-{suite}.png", title, [time, ratio])


def _speed_ratio(row: dict[str, Any]) -> dict[str, float] | None:
    a, b = row["torch"]["time"], row["tensorflow"]["time"]
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
