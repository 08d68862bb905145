"""memory: peak memory and throughput of a training step against batch size; the largest batch that fits.

The batch doubles until a step no longer fits (out of memory on a GPU; over ``--memory-limit``, by
default the device's memory on a GPU and a quarter of the available RAM on a CPU), a step takes longer
than the profile's budget, or the profile's largest batch is reached. When the limit was not reached,
a straight-line fit of memory against batch predicts where it would be, labelled as a prediction.
"""

from __future__ import annotations

import psutil
import torch

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.engines.torch.devices import accelerator
from gpulab.measure import bench_profiles
from gpulab.measure.bench_plots import memory_plot
from gpulab.measure.harness import MIB, BenchContext, memory_kind, missing_memory_note, peak_memory
from gpulab.measure.results import Row, SuiteResult

PROFILES = bench_profiles.MEMORY
GPU_MODELS, GPU_LAST = bench_profiles.MEMORY_GPU_MODELS, bench_profiles.MEMORY_GPU_LAST


def run(ctx: BenchContext) -> SuiteResult:
    cfg = dict(ctx.pick(PROFILES))
    if ctx.on_gpu:
        cfg["model"], cfg["last"] = GPU_MODELS.get(cfg["model"], cfg["model"]), GPU_LAST[ctx.profile]
    limit = ctx.memory_limit_bytes or default_limit(ctx.device)
    result = SuiteResult(
        title="Memory",
        description=f"fp32 training step of {cfg['model']} at doubling batch sizes: peak memory and "
        f"throughput; limit {limit / MIB:,.0f} MiB.",
    )
    rows, stop = _sweep(ctx, cfg, limit)
    result.notes += _largest(rows, stop, limit)
    result.notes.append(f"Memory figure: {_kind(ctx)}.")
    result.notes += missing_memory_note(rows, lambda r: f"batch {r.key['batch']}")
    result.rows = rows
    result.plots.append(memory_plot(rows, limit))
    return result


def _largest(rows: list[Row], stop: str, limit: int) -> list[str]:
    """Mark the largest batch that fits -- only where a batch over the limit shows it is the largest; when
    the sweep stopped for another reason the largest tried is marked as that, with a prediction."""
    fitting = [r for r in rows if r.info["fits"]]
    if not fitting:
        return []
    batch = fitting[-1].key["batch"]
    if len(fitting) < len(rows):
        fitting[-1].info["largest_fit"] = True
        return [f"Largest batch that fits under {limit / MIB:,.0f} MiB: {batch} ({stop})."]
    fitting[-1].info["largest_tried"] = True
    return [
        f"Every batch tried fits under {limit / MIB:,.0f} MiB, so the largest that fits was not found: "
        f"{stop}.",
        _prediction(rows, limit),
    ]


def default_limit(device: torch.device) -> int:
    """All of a device whose allocator counts its memory; else a quarter of the RAM available now."""
    acc = accelerator(device)
    if acc.allocator_peaks:
        return acc.capacity_bytes()
    return int(psutil.virtual_memory().available // 4)


def _sweep(ctx: BenchContext, cfg: dict, limit: int) -> tuple[list[Row], str]:
    rows: list[Row] = []
    batch = cfg["first"]
    while True:
        try:
            row = _measure(ctx, cfg, batch, limit)
        except torch.cuda.OutOfMemoryError:
            row = None  # freed below, once the exception no longer holds the step's tensors
        if row is None:
            _free(ctx.device)
            rows.append(Row({"batch": batch}, {}, {"fits": False, "why": "out of memory"}))
            return rows, f"batch {batch} ran out of device memory"
        rows.append(row)
        if not row.info["fits"]:
            return rows, f"batch {batch} needs more than the limit"
        if row.figures["step_time"].value / 1e3 > cfg["step_budget_s"]:
            return rows, f"stopped at batch {batch}: a step takes over {cfg['step_budget_s']:g} s"
        if batch * 2 > cfg["last"]:
            return rows, f"the profile's largest batch, {batch}, was reached without hitting the limit"
        batch *= 2


def _measure(ctx: BenchContext, cfg: dict, batch: int, limit: int) -> Row:
    work = load_workload(cfg["model"], seed=0, batch_size=batch)
    work.inputs, work.targets = _synthetic(work, batch)
    with single_runtime(ctx.device, "fp32") as rt:
        stepper = Stepper(work, rt)
        timing = ctx.measure(stepper.step, warmup=1, repeats=cfg["repeats"])
        memory = peak_memory(stepper.step, device=ctx.seam, repeats=2)
        state = _state_bytes(stepper)
    _free(ctx.device)
    figures = {"step_time": timing.seconds("ms"), "samples_per_s": timing.rate(batch, "samples/s")}
    info: dict = {"state_mib": round(state / MIB, 3)}
    if memory.figure is not None:
        figures["peak_memory"] = memory.figure
    else:
        info["no_peak_memory"] = memory.kind  # why: not measurable here, or below what a reading resolves
    # On a GPU the allocator's peak already holds the model and optimizer state; on a CPU the measured
    # growth does not, so the state is added before comparing with the limit (a reading below the CPU's
    # resolution counts as no growth).
    working = memory.figure.value * MIB if memory.figure is not None else 0.0
    info["fits"] = working + (0 if ctx.on_gpu else state) <= limit
    return Row({"batch": batch}, figures, info)


def _synthetic(work, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two batches of inputs shaped like the workload's (token ids stay within the vocabulary)."""
    shape = (2 * batch, *work.inputs.shape[1:])
    g = torch.Generator().manual_seed(0)  # never the caller's random stream
    if work.inputs.dtype.is_floating_point:
        classes = int(work.targets.max()) + 1
        return torch.randn(shape, generator=g), torch.randint(0, classes, (2 * batch,), generator=g)
    vocab = int(work.inputs.max()) + 1
    return torch.randint(0, vocab, shape, generator=g), torch.randint(0, vocab, shape, generator=g)


def _state_bytes(stepper: Stepper) -> int:
    params = list(stepper.model.parameters())
    total = sum(p.numel() * p.element_size() * (2 if p.grad is not None else 1) for p in params)
    for state in stepper.optimizer.state.values():
        total += sum(t.numel() * t.element_size() for t in state.values() if torch.is_tensor(t))
    return total


def _free(device: torch.device) -> None:
    accelerator(device).release_cached_memory()


def _kind(ctx: BenchContext) -> str:
    if ctx.on_gpu:
        return memory_kind(ctx.seam)
    return memory_kind(ctx.seam) + "; the model and optimizer state is added before comparing with the limit"


def _prediction(rows: list[Row], limit: int) -> str:
    points = [
        (r.key["batch"], r.figures["peak_memory"].value * MIB) for r in rows if "peak_memory" in r.figures
    ]
    if len(points) < 2:
        return "Too few points to predict where the limit would be reached."
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else 0.0
    if slope <= 0:
        return "Memory did not grow with the batch here, so no prediction of where the limit is reached."
    intercept = mean_y - slope * mean_x
    state = rows[-1].info["state_mib"] * MIB
    predicted = int((limit - state - intercept) / slope)
    return (
        f"Predicted (straight-line fit of the measured points, not measured): about {slope / MIB * 1024:.1f} "
        f"MiB per 1024 samples, so batches up to about {predicted:,} would fit under the limit."
    )
