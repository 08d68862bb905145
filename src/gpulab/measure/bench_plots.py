"""The plots of the suites that run on both engines: the torch suites (engines/torch/bench/) and their
TensorFlow sides (engines/tensorflow/bench/) draw their rows with the same functions, so the two engines'
figures of a suite look alike. Rows only: nothing here imports an engine."""

from __future__ import annotations

from gpulab.measure.harness import MIB
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Row


def matmul_plot(rows: list[Row], gpu: bool) -> Plot:
    keys = sorted({(r.key["device"], r.key["dtype"]) for r in rows}, key=lambda k: (k[0] != "cpu", k))
    throughput = Panel("Throughput", "n", "TFLOP/s", xscale="log2", yscale="log")
    for device, dtype in keys:
        where = lambda r, d=device, t=dtype: _matmul_is(r, d, t)  # noqa: E731
        throughput.series.append(series_from_rows(rows, f"{device} {dtype}", "n", "tflops", where=where))
    panels = [throughput]
    if gpu:
        for figure, title, unit in (
            ("speedup_vs_cpu", "Speedup over CPU", "x"),
            ("peak_fraction", "Of peak", ""),
        ):
            panel = Panel(title, "n", unit or "fraction of datasheet peak", xscale="log2")
            for device, dtype in keys:
                if device != "cpu":
                    where = lambda r, d=device, t=dtype: _matmul_is(r, d, t)  # noqa: E731
                    panel.series.append(series_from_rows(rows, f"{device} {dtype}", "n", figure, where=where))
            panels.append(panel)
    return Plot("matmul.png", "Matrix multiply (median, error bars: spread of repeats)", panels)


def _matmul_is(row: Row, device: str, dtype: str) -> bool:
    return row.key["device"] == device and row.key["dtype"] == dtype


def accumulate_plot(rows: list[Row]) -> Plot:
    time = Panel("Time of one optimizer step", "micro-batches k", "ms", xscale="log2")
    time.series.append(series_from_rows(rows, "step time", "k", "step_time"))
    speed = Panel("Throughput", "micro-batches k", "samples/s", xscale="log2")
    speed.series.append(series_from_rows(rows, "samples/s", "k", "samples_per_s"))
    return Plot("accumulate.png", "Gradient accumulation: same global batch, k micro-batches", [time, speed])


def memory_plot(rows: list[Row], limit: int) -> Plot:
    memory = Panel("Peak memory", "batch size", "MiB", xscale="log2")
    memory.series.append(series_from_rows(rows, "peak memory", "batch", "peak_memory"))
    highest = max(memory.series[0].high, default=0.0)
    if limit / MIB <= 4 * highest:  # drawn only where it does not flatten the curve to the axis
        memory.hlines.append({"y": limit / MIB, "label": f"limit {limit / MIB:,.0f} MiB"})
    else:
        memory.title += f" (limit {limit / MIB:,.0f} MiB, off the scale)"
    for r in rows:
        if r.info.get("largest_fit"):
            memory.marks.append({"x": r.key["batch"], "label": f"largest that fits: {r.key['batch']}"})
        elif r.info.get("largest_tried"):
            label = f"largest tried: {r.key['batch']} (the limit was not reached)"
            memory.marks.append({"x": r.key["batch"], "label": label})
    speed = Panel("Throughput", "batch size", "samples/s", xscale="log2")
    speed.series.append(series_from_rows(rows, "samples/s", "batch", "samples_per_s"))
    return Plot("memory.png", "Memory and throughput against batch size", [memory, speed])


def precision_plot(rows: list[Row], steps: int) -> Plot:
    models = list(dict.fromkeys(r.key["model"] for r in rows))
    panels = [
        Panel("Speedup over fp32", "precision", "x", kind="bar"),
        Panel(f"Loss after {steps} steps", "precision", "loss", kind="bar"),
        Panel("Peak memory", "precision", "MiB", kind="bar"),
    ]
    for panel, figure in zip(panels, ("speedup_vs_fp32", "loss_after", "peak_memory"), strict=True):
        for model in models:
            where = lambda r, m=model: r.key["model"] == m  # noqa: E731
            panel.series.append(series_from_rows(rows, model, "precision", figure, where=where))
    return Plot("precision.png", "Precision: the same training step (median, spread of repeats)", panels)
