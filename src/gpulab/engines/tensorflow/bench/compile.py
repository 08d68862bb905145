"""compile on TensorFlow: the training step as a plain ``tf.function`` (graph) against XLA
(``jit_compile=True``), the counterpart of torch's eager against torch.compile. The first step, tracing and
compilation included, is the compile time, kept out of the step time."""

from __future__ import annotations

import time

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.tensorflow.bench.stepper import tf_stepper
from gpulab.measure import bench_profiles
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult

VARIANTS = {"graph": False, "xla": True}


def run(ctx: TfBenchContext) -> SuiteResult:
    cfg = ctx.pick(bench_profiles.COMPILE)
    result = SuiteResult(
        title="XLA",
        description="Training step as tf.function (graph) against XLA (jit_compile=True); compile time (the "
        "first step) shown apart.",
    )
    for model in cfg["models"]:
        rows = [_one(ctx, model, variant, cfg) for variant in VARIANTS]
        rows[1].figures["speedup_vs_graph"] = Figure.ratio(
            rows[0].figures["step_time"], rows[1].figures["step_time"]
        )
        result.rows += rows
    result.notes.append(
        "TensorFlow has no eager training step worth timing: tf.function (what Keras's fit runs) is its "
        "baseline, as eager is torch's."
    )
    step = Panel("Step time (compile excluded)", "variant", "ms", kind="bar")
    first = Panel("Compile time (first step)", "variant", "s", kind="bar")
    for model in dict.fromkeys(r.key["model"] for r in result.rows):
        where = lambda r, m=model: r.key["model"] == m  # noqa: E731
        step.series.append(series_from_rows(result.rows, model, "variant", "step_time", where=where))
        first.series.append(series_from_rows(result.rows, model, "variant", "compile_time", where=where))
    result.plots.append(Plot("compile.png", "XLA against tf.function", [step, first]))
    return tensorflow_side(result, "compile")


def _one(ctx: TfBenchContext, model: str, variant: str, cfg: dict) -> Row:
    jit = VARIANTS[variant]
    with tf_stepper(ctx.tf_device, model, batch_size=cfg.get("batch_size"), jit=jit) as stepper:
        start = time.perf_counter()
        stepper.step()
        first = time.perf_counter() - start
        timing = ctx.measure(stepper.step)
        batch = stepper.batch_size
    figures = {
        "step_time": timing.seconds("ms"),
        "samples_per_s": timing.rate(batch, "samples/s"),
        "compile_time": Figure.single(first, "s", "lower"),
    }
    return Row({"model": model, "variant": variant}, figures, {"jit_compile": jit})
