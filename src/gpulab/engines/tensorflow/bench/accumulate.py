"""accumulate on TensorFlow: k micro-batches, one optimizer step, against k = 1 (the torch suite's sizes,
SGD and tolerance)."""

from __future__ import annotations

import numpy as np

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.tensorflow.bench.stepper import tf_stepper
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import accumulate_plot
from gpulab.measure.bench_rows import ATOL, RTOL, accumulate_row, note_equivalence
from gpulab.measure.results import SuiteResult


def run(ctx: TfBenchContext) -> SuiteResult:
    import keras

    cfg = ctx.pick(bench_profiles.ACCUMULATE)
    result = SuiteResult(
        title="Gradient accumulation",
        description=f"{cfg['model']}, global batch {cfg['global_batch']} split into k micro-batches: "
        "parameters after one optimizer step against k = 1, and the time of that step.",
    )
    reference, base = None, None
    for k in cfg["ks"]:
        sgd = keras.optimizers.SGD(learning_rate=0.1)
        with tf_stepper(
            ctx.tf_device, cfg["model"], batch_size=cfg["global_batch"], optimizer=sgd, accumulate=k
        ) as stepper:
            stepper.step()  # the one step whose result is compared
            params = stepper.parameters_vector()
            timing = ctx.measure(stepper.step)
        reference = params if reference is None else reference
        diff = float(np.abs(params - reference).max())
        equivalent = bool(np.allclose(params, reference, rtol=RTOL, atol=ATOL))
        base = accumulate_row(result, cfg, k, timing, base, diff, equivalent)
    note_equivalence(result)
    result.plots.append(accumulate_plot(result.rows))
    return tensorflow_side(result, "accumulate")
