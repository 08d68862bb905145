"""memory on TensorFlow: the torch suite's model and doubling batches, fp32. Peak memory and the largest
batch that fits only on a GPU (TensorFlow's allocator reports on GPUs only); on a CPU the sweep gives step
time and samples/s, and stops at the step budget or the profile's largest batch."""

from __future__ import annotations

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.tensorflow.bench.stepper import peak_memory_tf, tf_stepper
from gpulab.engines.torch.bench import memory
from gpulab.measure.results import Figure, Row, SuiteResult

# Smoke (the tests' profile): digits, as the transformer's step takes ~3 s to trace (see precision.py).
SMOKE_MODEL = "digits"


def run(ctx: TfBenchContext) -> SuiteResult:
    import tensorflow as tf

    cfg = dict(ctx.pick(memory.PROFILES))
    if ctx.profile == "smoke":
        cfg["model"] = SMOKE_MODEL
    if ctx.on_gpu:
        cfg["model"], cfg["last"] = (
            memory.GPU_MODELS.get(cfg["model"], cfg["model"]),
            memory.GPU_LAST[ctx.profile],
        )
    result = SuiteResult(
        title="Memory",
        description=f"fp32 training step of {cfg['model']} at doubling batch sizes: peak memory (GPU) and "
        "throughput.",
    )
    batch, why = cfg["first"], ""
    while True:
        try:
            row, why = _measure(tf, ctx, cfg, batch)
        except tf.errors.ResourceExhaustedError:
            result.rows.append(Row({"batch": batch}, {}, {"fits": False, "why": "out of memory"}))
            stop = f"batch {batch} ran out of device memory"
            break
        result.rows.append(row)
        if row.figures["step_time"].value / 1e3 > cfg["step_budget_s"]:
            stop = f"stopped at batch {batch}: a step takes over {cfg['step_budget_s']:g} s"
            break
        if batch * 2 > cfg["last"]:
            stop = f"the profile's largest batch, {batch}, was reached without running out of memory"
            break
        batch *= 2
    result.notes += [f"Sweep: {stop}.", f"Peak memory: {why}."]
    result.plots.append(memory._plot(result.rows, memory.default_limit(ctx.device)))
    return tensorflow_side(result, "memory")


def _measure(tf, ctx: TfBenchContext, cfg: dict, batch: int) -> tuple[Row, str]:
    from gpulab.engines.torch.bench import load_workload

    work = load_workload(cfg["model"], seed=0, batch_size=batch)  # the torch suite's synthetic batches
    x, y = memory._synthetic(work, batch)
    if x.ndim == 4:  # images: torch's NCHW -> TensorFlow's NHWC, as the TensorFlow recipes do
        x = x.permute(0, 2, 3, 1).contiguous()
    data = (x, y)
    with tf_stepper(ctx.tf_device, cfg["model"], batch_size=batch, data=data) as stepper:
        timing = ctx.measure(stepper.step, warmup=1, repeats=cfg["repeats"])
        peak, why = peak_memory_tf(tf, ctx.tf_device, stepper.step)
    figures = {"step_time": timing.seconds("ms"), "samples_per_s": timing.rate(batch, "samples/s")}
    info: dict = {"fits": True}
    if peak is None:
        info["no_peak_memory"] = why
    else:
        figures["peak_memory"] = Figure.single(peak, "MiB", "lower")
    return Row({"batch": batch}, figures, info), why
