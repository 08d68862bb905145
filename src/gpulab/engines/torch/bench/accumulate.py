"""accumulate: gradient accumulation gives the same step as one big batch, at what cost in throughput.

For each number of micro-batches k the same global batch is split k ways, each loss divided by k, and
one optimizer step taken. Equivalence: the parameters after that step against k = 1 (SGD, so the update
is linear in the gradient and a difference is the summation order's rounding, nothing else). Cost:
the time of one optimizer step against k = 1, as smaller micro-batches use the device less well.
"""

from __future__ import annotations

import torch

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import accumulate_plot
from gpulab.measure.bench_rows import accumulate_row, note_equivalence
from gpulab.measure.harness import BenchContext
from gpulab.measure.results import Figure, SuiteResult

PROFILES = bench_profiles.ACCUMULATE
RTOL, ATOL = bench_profiles.ACCUMULATE_RTOL, bench_profiles.ACCUMULATE_ATOL


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    result = SuiteResult(
        title="Gradient accumulation",
        description=f"{cfg['model']}, global batch {cfg['global_batch']} split into k micro-batches: "
        "parameters after one optimizer step against k = 1, and the time of that step.",
    )
    reference: torch.Tensor | None = None
    base_time: Figure | None = None
    for k in cfg["ks"]:
        params, timing = _run_k(ctx, cfg, k)
        reference = params if reference is None else reference
        diff = float((params - reference).abs().max())
        equivalent = bool(torch.allclose(params, reference, rtol=RTOL, atol=ATOL))
        base_time = accumulate_row(result, cfg, k, timing, base_time, diff, equivalent)
    note_equivalence(result)
    result.notes.append(
        "Equivalence holds for equal micro-batches and models without batch statistics "
        "(BatchNorm sees k smaller batches)."
    )
    result.plots.append(accumulate_plot(result.rows))
    return result


def _run_k(ctx: BenchContext, cfg: dict, k: int):
    work = load_workload(cfg["model"], seed=0, batch_size=cfg["global_batch"])
    with single_runtime(ctx.device, "fp32") as rt:
        stepper = Stepper(work, rt, optimizer=_sgd, accumulate=k)
        stepper.step()  # the one step whose result is compared
        params = stepper.parameters_vector()
        timing = ctx.measure(stepper.step)
    return params, timing
