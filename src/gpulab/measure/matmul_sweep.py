"""The matmul suite's sweep, on either engine: for the CPU and the GPU, each dtype and each size, one timed
n x n product (the engine's ``MatmulEngine.timer``) until a point's predicted time is over the profile's
budget or the product no longer fits; then the speedups, notes and plot. The torch suite
(engines/torch/bench/matmul.py) and the TensorFlow one differ only in their ``MatmulEngine``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpulab.hardware.devices import cpu_model
from gpulab.hardware.peaks import datasheet_peak
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import matmul_plot
from gpulab.measure.bench_rows import matmul_speedups
from gpulab.measure.harness import BenchContext, Timing
from gpulab.measure.results import Row, SuiteResult

DTYPES = ("fp32", "tf32", "bf16", "fp16")


@dataclass
class MatmulEngine:
    """What the sweep needs from an engine. Devices are the engine's own (``torch.device`` or a
    ``DeviceName``): the sweep reads their ``type`` and ``str``."""

    cpu: Any  # the CPU device, swept first
    timer: Callable[[BenchContext, Any, str, int], Timing]  # (ctx, device, dtype, n) -> one point's timing
    oom: tuple[type[BaseException], ...]  # the engine's out-of-memory errors: the sweep ends there
    device_name: Callable[[Any], str]  # a GPU's name, as the datasheet table knows it
    threads_note: Callable[[], str]  # how many threads CPU products use
    release: Callable[[Any], None] = lambda device: None  # after a device's sweep (cached memory back)


def run(ctx: BenchContext, engine: MatmulEngine) -> SuiteResult:
    cfg = ctx.pick(bench_profiles.MATMUL)
    devices = [engine.cpu] + ([ctx.device] if ctx.device.type != "cpu" else [])
    result = SuiteResult(
        title="Matrix multiply",
        description="n x n @ n x n products: TFLOP/s (2n³ / median time), speedup over the CPU and "
        "fraction of the datasheet peak, per dtype.",
    )
    for device in devices:
        for dtype in DTYPES:
            result.rows += _sweep(ctx, engine, device, dtype, cfg, result.notes)
    matmul_speedups(result.rows)
    result.notes += _notes(engine, devices)
    result.plots.append(matmul_plot(result.rows, gpu=len(devices) > 1))
    return result


def _sweep(
    ctx: BenchContext, engine: MatmulEngine, device: Any, dtype: str, cfg: dict, notes: list[str]
) -> list[Row]:
    peak = datasheet_peak(engine.device_name(device), dtype) if device.type == "cuda" else None
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
            timing = engine.timer(ctx, device, dtype, n)
        except engine.oom:
            notes.append(f"{device} {dtype}: n = {n} does not fit in memory; larger sizes skipped")
            break
        previous = (n, timing.median_s)
        figures = {"time": timing.seconds("ms"), "tflops": timing.rate(2 * n**3, "TFLOP/s", 1e-12)}
        if peak:
            figures["peak_fraction"] = timing.rate(2 * n**3 / peak, "of peak")
        rows.append(
            Row({"device": str(device), "dtype": dtype, "n": n}, figures, {"calls_per_sample": timing.inner})
        )
    engine.release(device)  # after an out-of-memory too, once the exception has let go of the tensors
    return rows


def _notes(engine: MatmulEngine, devices: list[Any]) -> list[str]:
    notes = ["tf32 on a CPU is fp32: CPUs have no TF32 units, so the kernels and the results are the same."]
    if len(devices) == 1:
        notes.insert(0, f"No GPU: the curve is the CPU's ({cpu_model()}); there is no speedup to show.")
        notes.append("No datasheet peak is known for CPUs, so there is no fraction of peak.")
    elif datasheet_peak(engine.device_name(devices[1]), "fp32") is None:
        notes.append(f"{engine.device_name(devices[1])} is not in the datasheet table: no fraction of peak.")
    notes.append(engine.threads_note())
    return notes
