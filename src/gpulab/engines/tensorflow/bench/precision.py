"""precision on TensorFlow: the torch suite's models, precisions and step counts through the TensorFlow
engine's precisions (Keras policies, LossScaleOptimizer for fp16-mixed)."""

from __future__ import annotations

import math

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.tensorflow.bench.stepper import peak_memory_tf, tf_stepper
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import precision_plot
from gpulab.measure.bench_rows import launch_bound_notes
from gpulab.measure.results import Figure, Row, SuiteResult

# Smoke (the tests' profile) keeps to digits: tracing a transformer's training step into a graph takes
# ~3 s per precision on TensorFlow (measured, busy 2-core CPU), most of the suite's time.
SMOKE_MODELS = ("digits",)


def run(ctx: TfBenchContext) -> SuiteResult:
    cfg = dict(ctx.pick(bench_profiles.PRECISION))
    if ctx.profile == "smoke":
        cfg["models"] = SMOKE_MODELS
    models = [bench_profiles.PRECISION_GPU_MODELS.get(m, m) if ctx.on_gpu else m for m in cfg["models"]]
    result = SuiteResult(
        title="Precision",
        description=f"One training step (tf.function) per precision, same initial weights and batches; "
        f"loss on a fixed batch after {cfg['steps']} steps.",
    )
    for model in models:
        rows = [_one(ctx, model, p, cfg, result.notes) for p in bench_profiles.PRECISION_NAMES]
        for row in rows:
            row.figures["speedup_vs_fp32"] = Figure.ratio(
                rows[0].figures["step_time"], row.figures["step_time"]
            )
        result.rows += rows
    missing = {r.info["no_peak_memory"] for r in result.rows if "no_peak_memory" in r.info}
    result.notes += [f"Peak memory: {why}." for why in sorted(missing)]
    result.notes += launch_bound_notes(result.rows) if ctx.on_gpu else []
    if not any(r.info["diverged"] for r in result.rows):
        result.notes.append("No precision diverged: every loss is finite and lower than before training.")
    result.plots.append(precision_plot(result.rows, cfg["steps"]))
    return tensorflow_side(result, "precision")


def _one(ctx: TfBenchContext, model: str, name: str, cfg: dict, notes: list[str]) -> Row:
    import tensorflow as tf

    with tf_stepper(ctx.tf_device, model, name, batch_size=cfg.get("batch_size")) as stepper:
        before = stepper.eval_loss()
        timing = ctx.measure(stepper.step, warmup=cfg["warmup"], repeats=cfg["steps"] - cfg["warmup"])
        after = stepper.eval_loss()
        peak, why = peak_memory_tf(tf, ctx.tf_device, stepper.step)
        batch = stepper.batch_size
    diverged = not math.isfinite(after) or after >= before
    if diverged:
        notes.append(f"{model} {name} DIVERGED: loss {before:.4g} -> {after:.4g}")
    figures = {
        "step_time": timing.seconds("ms"),
        "samples_per_s": timing.rate(batch, "samples/s"),
        "loss_after": Figure.single(after, "loss"),
    }
    info = {"loss_before": before, "diverged": diverged, "batch_size": batch, "steps": cfg["steps"]}
    if peak is None:
        info["no_peak_memory"] = why
    else:
        figures["peak_memory"] = Figure.single(peak, "MiB", "lower")
    return Row({"model": model, "precision": name}, figures, info)
