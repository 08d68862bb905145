"""matmul: an n x n @ n x n product on the CPU and on the GPU, in fp32, tf32, bf16 and fp16.

TFLOP/s = 2n³ / time. On a GPU each point also gets the speedup over the CPU at the same size and dtype
and the fraction of the part's datasheet peak. Sizes a device would take too long on (fp16 on most
CPUs has no fast kernel) are skipped by a time budget per point, predicted from the size below.
"""

from __future__ import annotations

import torch

from gpulab.hardware.devices import cpu_model
from gpulab.hardware.peaks import datasheet_peak
from gpulab.measure.harness import BenchContext
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult
from gpulab.runtime.precision import TF32

PROFILES = {
    "full": {"sizes": (256, 512, 1024, 2048, 4096, 8192), "budget_s": 30.0},
    "quick": {"sizes": (256, 512, 1024, 2048, 4096, 8192), "budget_s": 3.0},
    "smoke": {"sizes": (64, 128), "budget_s": 1.0},
}
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MIN_SAMPLE_S = 0.01  # batch products shorter than this into one clock read


def run(ctx: BenchContext, timer=None, oom: tuple = ()) -> SuiteResult:
    """``timer(ctx, device, dtype, n) -> Timing`` and ``oom`` (its out-of-memory errors) let the
    TensorFlow side (``engines/tensorflow/bench/matmul.py``) reuse the sweep, budget and plot."""
    cfg = ctx.pick(PROFILES)
    devices = [torch.device("cpu")] + ([ctx.device] if ctx.device.type != "cpu" else [])
    result = SuiteResult(
        title="Matrix multiply",
        description="n x n @ n x n products: TFLOP/s (2n³ / median time), speedup over the CPU and "
        "fraction of the datasheet peak, per dtype.",
    )
    for device in devices:
        for dtype in DTYPES:
            result.rows += _sweep(ctx, device, dtype, cfg, result.notes, timer, oom)
    _add_speedups(result.rows)
    result.notes += _notes(devices)
    result.plots.append(_plot(result.rows, gpu=len(devices) > 1))
    return result


def _sweep(
    ctx: BenchContext, device: torch.device, dtype: str, cfg: dict, notes: list[str], timer, oom
) -> list[Row]:
    name = _device_name(device)
    peak = datasheet_peak(name, dtype) if device.type == "cuda" else None
    rows: list[Row] = []
    previous: tuple[int, float] | None = None  # (n, seconds per product)
    for n in cfg["sizes"]:
        if previous is not None:
            predicted = previous[1] * (n / previous[0]) ** 3 * (ctx.warmup + ctx.repeats)
            if predicted > cfg["budget_s"]:
                notes.append(
                    f"{device} {dtype}: n >= {n} skipped (predicted {predicted:.1f} s for the point, over "
                    f"the {cfg['budget_s']:g} s budget per point)"
                )
                break
        try:
            timing = (timer or _time_product)(ctx, device, dtype, n)
        except (torch.cuda.OutOfMemoryError, *oom):
            notes.append(f"{device} {dtype}: n = {n} does not fit in memory; larger sizes skipped")
            break
        previous = (n, timing.median_s)
        figures = {"time": timing.seconds("ms"), "tflops": timing.rate(2 * n**3, "TFLOP/s", 1e-12)}
        if peak:
            figures["peak_fraction"] = timing.rate(2 * n**3 / peak, "of peak")
        rows.append(
            Row({"device": str(device), "dtype": dtype, "n": n}, figures, {"calls_per_sample": timing.inner})
        )
    if device.type == "cuda":
        torch.cuda.empty_cache()  # after an out-of-memory too, once the exception has let go of the tensors
    return rows


def _time_product(ctx: BenchContext, device: torch.device, dtype: str, n: int):
    g = torch.Generator(device=device).manual_seed(0)  # never the caller's random stream
    a, b = (torch.randn(n, n, device=device, dtype=DTYPES[dtype], generator=g) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=DTYPES[dtype])
    policy = TF32(device.type) if dtype == "tf32" else None
    if policy:
        policy.setup()
    try:
        with torch.inference_mode():
            return ctx.measure(lambda: torch.matmul(a, b, out=c), device=device, min_sample_s=MIN_SAMPLE_S)
    finally:
        if policy:
            policy.teardown()


def _add_speedups(rows: list[Row]) -> None:
    """Each accelerator row gets its speedup over the CPU row of the same dtype and size."""
    cpu = {(r.key["dtype"], r.key["n"]): r for r in rows if r.key["device"] == "cpu"}
    for row in rows:
        base = cpu.get((row.key["dtype"], row.key["n"]))
        if row.key["device"] != "cpu" and base is not None:
            row.figures["speedup_vs_cpu"] = Figure.ratio(row.figures["tflops"], base.figures["tflops"])


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def _notes(devices: list[torch.device]) -> list[str]:
    notes = ["tf32 on a CPU is fp32: CPUs have no TF32 units, so the kernels and the results are the same."]
    if len(devices) == 1:
        notes.insert(0, f"No GPU: the curve is the CPU's ({cpu_model()}); there is no speedup to show.")
        notes.append("No datasheet peak is known for CPUs, so there is no fraction of peak.")
    elif datasheet_peak(_device_name(devices[1]), "fp32") is None:
        notes.append(f"{_device_name(devices[1])} is not in the datasheet table: no fraction of peak.")
    notes.append(f"CPU products use {torch.get_num_threads()} threads.")
    return notes


def _plot(rows: list[Row], gpu: bool) -> Plot:
    keys = sorted({(r.key["device"], r.key["dtype"]) for r in rows}, key=lambda k: (k[0] != "cpu", k))
    throughput = Panel("Throughput", "n", "TFLOP/s", xscale="log2", yscale="log")
    for device, dtype in keys:
        throughput.series.append(
            series_from_rows(
                rows, f"{device} {dtype}", "n", "tflops", where=lambda r, d=device, t=dtype: _is(r, d, t)
            )
        )
    panels = [throughput]
    if gpu:
        for figure, title, unit in (
            ("speedup_vs_cpu", "Speedup over CPU", "x"),
            ("peak_fraction", "Of peak", ""),
        ):
            panel = Panel(title, "n", unit or "fraction of datasheet peak", xscale="log2")
            for device, dtype in keys:
                if device != "cpu":
                    where = lambda r, d=device, t=dtype: _is(r, d, t)  # noqa: E731
                    panel.series.append(series_from_rows(rows, f"{device} {dtype}", "n", figure, where=where))
            panels.append(panel)
    return Plot("matmul.png", "Matrix multiply (median, error bars: spread of repeats)", panels)


def _is(row: Row, device: str, dtype: str) -> bool:
    return row.key["device"] == device and row.key["dtype"] == dtype
