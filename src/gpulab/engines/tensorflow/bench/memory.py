"""memory on TensorFlow: the torch suite's model and doubling batches, fp32. Peak memory and the largest
batch that fits only on a GPU (TensorFlow's allocator reports on GPUs only); on a CPU the sweep gives step
time and samples/s, and stops at the step budget or the profile's largest batch."""

from __future__ import annotations

import os

import numpy as np
import psutil

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.tensorflow.bench.stepper import peak_memory_tf, tf_stepper
from gpulab.engines.tensorflow.data import as_arrays
from gpulab.engines.tensorflow.recipes import load_tf_recipe
from gpulab.hardware.nvml import physical_index_for, read_gpu
from gpulab.measure import bench_profiles
from gpulab.measure.bench_models import MODELS
from gpulab.measure.bench_plots import memory_plot
from gpulab.measure.results import Figure, Row, SuiteResult

# Smoke (the tests' profile): digits, as the transformer's step takes ~3 s to trace (see precision.py).
SMOKE_MODEL = "digits"


def run(ctx: TfBenchContext) -> SuiteResult:
    import tensorflow as tf

    cfg = dict(ctx.pick(bench_profiles.MEMORY))
    if ctx.profile == "smoke":
        cfg["model"] = SMOKE_MODEL
    if ctx.on_gpu:
        cfg["model"], cfg["last"] = (
            bench_profiles.MEMORY_GPU_MODELS.get(cfg["model"], cfg["model"]),
            bench_profiles.MEMORY_GPU_LAST[ctx.profile],
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
    result.plots.append(memory_plot(result.rows, _default_limit(ctx)))
    return tensorflow_side(result, "memory")


def _measure(tf, ctx: TfBenchContext, cfg: dict, batch: int) -> tuple[Row, str]:
    data = _synthetic(cfg["model"], batch)
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


def _synthetic(model: str, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Two batches shaped like the recipe's data, as the torch suite's (token ids stay within the
    vocabulary); images are already NHWC in the TensorFlow recipes."""
    recipe_name, options, _ = MODELS[model]
    x, y = as_arrays(load_tf_recipe(recipe_name, dict(options)).train_data)
    shape = (2 * batch, *x.shape[1:])
    rng = np.random.default_rng(0)  # never the global random stream
    if np.issubdtype(x.dtype, np.floating):
        classes = int(y.max()) + 1
        return rng.standard_normal(shape).astype(x.dtype), rng.integers(0, classes, 2 * batch).astype(y.dtype)
    vocab = int(x.max()) + 1
    return rng.integers(0, vocab, shape).astype(x.dtype), rng.integers(0, vocab, shape).astype(y.dtype)


def _default_limit(ctx: TfBenchContext) -> int:
    """The limit the plot draws, as the torch suite's: the GPU's memory (NVML's figure, as TensorFlow
    reports none for a physical GPU), a quarter of the available RAM on a CPU."""
    if ctx.on_gpu:
        index = physical_index_for(ctx.device.index or 0, os.environ.get("CUDA_VISIBLE_DEVICES"))
        total = read_gpu(index).memory_total_bytes if index is not None else None
        if total:
            return int(total)
    return int(psutil.virtual_memory().available // 4)
