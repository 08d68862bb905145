"""accumulate: gradient accumulation gives the same step as one big batch, at what cost in throughput.

For each number of micro-batches k the same global batch is split k ways, each loss divided by k, and
one optimizer step taken. Equivalence: the parameters after that step against k = 1 (SGD, so the update
is linear in the gradient and a difference is the summation order's rounding, nothing else). Cost:
the time of one optimizer step against k = 1, as smaller micro-batches use the device less well.
"""

from __future__ import annotations

import torch

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.measure.harness import BenchContext
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult

PROFILES = {
    "full": {"model": "digits", "global_batch": 256, "ks": (1, 2, 4, 8, 16)},
    "quick": {"model": "digits", "global_batch": 128, "ks": (1, 2, 4, 8)},
    "smoke": {"model": "digits", "global_batch": 8, "ks": (1, 2)},
}
RTOL, ATOL = 1e-4, 1e-6  # fp32 sums in another order differ by a few ulps, far inside this


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def add_row(result: SuiteResult, cfg: dict, k: int, timing, base_time, diff: float, equivalent: bool):
    """k's row (step time, samples/s, time against k = 1); returns k = 1's step time. Both engines' suites."""
    step_time = timing.seconds("ms")
    base_time = base_time or step_time
    figures = {
        "step_time": step_time,
        "samples_per_s": timing.rate(cfg["global_batch"], "samples/s"),
        "time_vs_k1": Figure.ratio(step_time, base_time, better="lower"),
    }
    info = {"micro_batch": cfg["global_batch"] // k, "max_abs_param_diff": diff, "equivalent": equivalent}
    result.rows.append(Row({"model": cfg["model"], "k": k}, figures, info))
    if not equivalent:
        result.notes.append(f"k = {k} is NOT equivalent to k = 1: largest parameter difference {diff:.3g}")
    return base_time


def note_equivalence(result: SuiteResult) -> None:
    if all(r.info["equivalent"] for r in result.rows):
        worst = max(r.info["max_abs_param_diff"] for r in result.rows)
        result.notes.append(
            f"Every k gives the parameters of k = 1 after one step (largest difference {worst:.2g}, "
            f"tolerance rtol={RTOL:g}, atol={ATOL:g})."
        )


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
        base_time = add_row(result, cfg, k, timing, base_time, diff, equivalent)
    note_equivalence(result)
    result.notes.append(
        "Equivalence holds for equal micro-batches and models without batch statistics "
        "(BatchNorm sees k smaller batches)."
    )
    result.plots.append(_plot(result.rows))
    return result


def _run_k(ctx: BenchContext, cfg: dict, k: int):
    work = load_workload(cfg["model"], seed=0, batch_size=cfg["global_batch"])
    with single_runtime(ctx.device, "fp32") as rt:
        stepper = Stepper(work, rt, optimizer=_sgd, accumulate=k)
        stepper.step()  # the one step whose result is compared
        params = stepper.parameters_vector()
        timing = ctx.measure(stepper.step)
    return params, timing


def _plot(rows: list[Row]) -> Plot:
    time = Panel("Time of one optimizer step", "micro-batches k", "ms", xscale="log2")
    time.series.append(series_from_rows(rows, "step time", "k", "step_time"))
    speed = Panel("Throughput", "micro-batches k", "samples/s", xscale="log2")
    speed.series.append(series_from_rows(rows, "samples/s", "k", "samples_per_s"))
    return Plot("accumulate.png", "Gradient accumulation: same global batch, k micro-batches", [time, speed])
