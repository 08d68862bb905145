"""precision: the same training step of the digits CNN and the chargpt transformer in each precision.

Every precision starts from the same weights and sees the same batches, so step time, samples/s, peak
memory and the loss after N steps compare like for like. A precision whose loss is not finite, or no
lower than where it started, after N steps is flagged as diverged.
"""

from __future__ import annotations

import math

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import precision_plot
from gpulab.measure.bench_rows import launch_bound_notes
from gpulab.measure.harness import BenchContext, memory_kind, missing_memory_note, peak_memory
from gpulab.measure.results import Figure, Row, SuiteResult

PRECISIONS, PROFILES = bench_profiles.PRECISION_NAMES, bench_profiles.PRECISION
GPU_MODELS = bench_profiles.PRECISION_GPU_MODELS


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    models = [GPU_MODELS.get(m, m) if ctx.on_gpu else m for m in cfg["models"]]
    result = SuiteResult(
        title="Precision",
        description=f"One training step per precision, same initial weights and batches; loss on a fixed "
        f"batch after {cfg['steps']} steps.",
    )
    for model in models:
        rows = [_one(ctx, model, precision, cfg, result.notes) for precision in PRECISIONS]
        base = rows[0].figures["step_time"]
        for row in rows:
            row.figures["speedup_vs_fp32"] = Figure.ratio(base, row.figures["step_time"])
        result.rows += rows
    result.notes += _notes(ctx, result.rows)
    result.plots.append(precision_plot(result.rows, cfg["steps"]))
    return result


def _one(ctx: BenchContext, model: str, precision: str, cfg: dict, notes: list[str]) -> Row:
    work = load_workload(model, seed=0, batch_size=cfg.get("batch_size"))
    with single_runtime(ctx.device, precision) as rt:
        stepper = Stepper(work, rt)
        loss_before = stepper.eval_loss()
        timing = ctx.measure(stepper.step, warmup=cfg["warmup"], repeats=cfg["steps"] - cfg["warmup"])
        loss_after = stepper.eval_loss()
        memory = peak_memory(stepper.step, device=ctx.seam, repeats=2)
        skipped = int(getattr(rt.precision, "skipped_steps", 0))
    diverged = not math.isfinite(loss_after) or loss_after >= loss_before
    if diverged:
        notes.append(f"{model} {precision} DIVERGED: loss {loss_before:.4g} -> {loss_after:.4g}")
    figures = {
        "step_time": timing.seconds("ms"),
        "samples_per_s": timing.rate(work.batch_size, "samples/s"),
        "loss_after": Figure.single(loss_after, "loss"),
    }
    info = {"loss_before": loss_before, "diverged": diverged, "batch_size": work.batch_size}
    if memory.figure is not None:
        figures["peak_memory"] = memory.figure
    else:
        info["no_peak_memory"] = memory.kind  # why: not measurable here, or below what a reading resolves
    info |= {"steps": cfg["steps"], "skipped_steps": skipped}
    return Row({"model": model, "precision": precision}, figures, info)


def _notes(ctx: BenchContext, rows: list[Row]) -> list[str]:
    notes = []
    if not ctx.on_gpu:
        notes += [
            "On a CPU, tf32 is fp32 (no TF32 units); differences between them are noise.",
            "On a CPU, fp16 has no fast kernels for many ops (matmul, convolution): expect it slowest. "
            "bf16 is fast where the CPU has AVX512-BF16 or AMX.",
        ]
    cpu = (
        "" if ctx.on_gpu else ": the step's working memory, not the model and optimizer state held before it"
    )
    if any("peak_memory" in r.figures for r in rows):
        notes.append(f"Peak memory: {memory_kind(ctx.seam)}{cpu}.")
    notes += missing_memory_note(rows, lambda r: f"{r.key['model']} {r.key['precision']}")
    notes += launch_bound_notes(rows) if ctx.on_gpu else []
    if not any(r.info["diverged"] for r in rows):
        notes.append("No precision diverged: every loss is finite and lower than before training.")
    return notes
