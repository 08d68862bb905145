"""parallel: one process against gpulab's DDP strategy over the devices there are.

Real processes are started (``torch.multiprocessing``, spawn) with torchrun's variables and meet at
127.0.0.1 on a free port; each runs the ``Runtime`` a Trainer would (strategy ``ddp``: NCCL over the
GPUs where there are some, gloo on the CPU with two processes, the collective watchdog on). Every
process starts from the same weights and takes its share of the same global batches; DDP averages the
gradients, so after the same number of steps the parameters must equal the single process's, which is
checked. Where there are several GPUs, legacy ``nn.DataParallel`` (one process, the batch scattered per
step) is timed too.

On a CPU this is a correctness and overhead demonstration, not a speedup: the processes share the
cores the single process had to itself, and the model is small enough that communication dominates.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch import nn

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.distributed.process_group import exit_without_teardown
from gpulab.engines.torch.recipes import mlp
from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.step_call import LossCall
from gpulab.engines.torch.train.step import TorchStep
from gpulab.hardware.load import usable_cores
from gpulab.measure.harness import BenchContext, Timing, measure
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult

PROFILES = {
    "full": {"global_batch": 512, "warmup": 5, "steps": 50, "timeout_s": 600},
    "quick": {"global_batch": 256, "warmup": 3, "steps": 20, "timeout_s": 180},
    "smoke": {"global_batch": 32, "warmup": 1, "steps": 3, "timeout_s": 180},
}
CPU_PROCESSES = 2
ATOL = 1e-5


@dataclass(frozen=True)
class Job:
    """What every process needs to run the same steps: sizes, device type, where to write."""

    global_batch: int
    warmup: int
    steps: int
    device_type: str  # cpu | cuda
    out_dir: str


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    world = torch.cuda.device_count() if ctx.on_gpu else CPU_PROCESSES
    backend = "nccl" if ctx.on_gpu else "gloo"
    result = SuiteResult(
        title="Data parallel",
        description=f"mlp, global batch {cfg['global_batch']}, {cfg['steps']} SGD steps: one process against "
        f"DDP over {world} processes ({backend}); parameters compared after the same steps.",
    )
    with tempfile.TemporaryDirectory(prefix="gpulab-bench-ddp-") as tmp:
        job = Job(cfg["global_batch"], cfg["warmup"], cfg["steps"], ctx.device.type, tmp)
        single_timing, single_params = _single(job, ctx.device)
        single = _row("single", 1, str(ctx.device), job, single_timing, None)
        rows = [single]
        if ctx.on_gpu and world > 1:
            timing, params = _single(job, ctx.device, data_parallel=True)
            rows.append(_row("dataparallel", 1, f"cuda x{world}", job, timing, _diff(params, single_params)))
        start = time.perf_counter()
        samples, params = _spawn_ddp(job, world, cfg["timeout_s"])
        wall = time.perf_counter() - start
        ddp = _row(
            "ddp", world, f"{ctx.device.type} x{world}", job, Timing(samples), _diff(params, single_params)
        )
        ddp.figures["wall_time"] = Figure.single(wall, "s", "lower")
        rows.append(ddp)
    for row in rows[1:]:
        row.figures["time_vs_single"] = Figure.ratio(
            row.figures["step_time"], single.figures["step_time"], better="lower"
        )
    result.rows = rows
    result.notes += _notes(ctx, rows, world)
    result.plots.append(_plot(rows))
    return result


def _row(mode: str, processes: int, devices: str, job: Job, timing: Timing, diff: float | None) -> Row:
    figures = {"step_time": timing.seconds("ms"), "samples_per_s": timing.rate(job.global_batch, "samples/s")}
    info = {}
    if diff is not None:
        info = {"max_abs_param_diff": diff, "equal_to_single": diff <= ATOL}
    return Row({"mode": mode, "processes": processes, "devices": devices}, figures, info)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _notes(ctx: BenchContext, rows: list[Row], world: int) -> list[str]:
    notes = []
    for row in rows[1:]:
        verdict = "equal" if row.info["equal_to_single"] else "NOT equal"
        notes.append(
            f"{row.key['mode']}: parameters {verdict} to one process's after the same steps "
            f"(largest difference {row.info['max_abs_param_diff']:.2g}, tolerance {ATOL:g})."
        )
    if not ctx.on_gpu:
        notes.append(
            f"CPU: {world} gloo processes with {_threads_per_process(world)} thread(s) each against one "
            f"process with {torch.get_num_threads()}: a demonstration of correctness and overhead, not speed."
        )
        notes.append("DataParallel needs several GPUs: not run.")
    elif world == 1:
        notes.append("One GPU: DDP runs one process (its overhead alone); DataParallel needs several GPUs.")
    notes.append("wall_time: from starting the processes to their results, start-up and imports included.")
    for row in rows[1:]:
        if speedup := _beyond_its_processes(rows[0], row):
            notes.append(
                f"{row.key['mode']}: {speedup:.0f}x faster than one process on {row.key['devices']}, more "
                "than its processes can give: the machine's load changed between the runs; not drawn in "
                "parallel.png."
            )
    return notes


def _plot(rows: list[Row]) -> Plot:
    def label(row: Row) -> str:
        return f"{row.key['mode']} ({row.key['devices']})"

    names = [label(row) for row in rows]
    beyond = {label(row): speedup for row in rows[1:] if (speedup := _beyond_its_processes(rows[0], row))}
    drawn = lambda row: label(row) not in beyond  # noqa: E731
    step = Panel("Step time", "", "ms", kind="bar", categories=names)
    step.series.append(series_from_rows(rows, "step time", label, "step_time", where=drawn))
    speed = Panel("Throughput", "", "samples/s", kind="bar", categories=names)
    speed.series.append(series_from_rows(rows, "samples/s", label, "samples_per_s", where=drawn))
    note = "; ".join(
        f"{name}: not drawn: {speedup:.0f}x faster than one process is more than its processes can give "
        "(the machine's load changed between the measurements)"
        for name, speedup in beyond.items()
    )
    return Plot("parallel.png", "One process against data parallel", [step, speed], note=note)


def _beyond_its_processes(single: Row, row: Row) -> float | None:
    """``row``'s speed-up over one process when it exceeds the number of processes (or devices) that ran
    it: not a comparable measurement (under load the single process had less of the machine), so it is
    named instead of drawn."""
    one, this = single.figures.get("step_time"), row.figures.get("step_time")
    if not one or not this or not this.value:
        return None
    spread = re.search(r" x(\d+)$", str(row.key["devices"]))  # "cuda x4": DataParallel's devices
    workers = max(row.key["processes"], int(spread.group(1)) if spread else 1)
    speedup = one.value / this.value
    return speedup if speedup > workers else None


# --------------------------------------------------------------------------------------------------------
# The work itself: the same in the parent and in every DDP process.


def _setup(
    job: Job, device: torch.device
) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = mlp.make_model().to(device)
    x, y = mlp.make_data(job.global_batch * (job.warmup + job.steps), 20, seed=1234)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), x.to(device), y.to(device)


def _stepper(model, optimizer, x, y, batch: int, shard: slice, runtime: Runtime | None = None):
    """One step of plain PyTorch, or the Trainer's own step (``train/step.py``) on ``runtime``."""
    loss_fn = nn.BCEWithLogitsLoss()
    cursor = [0]

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        i = cursor[0]
        cursor[0] += 1
        return x[i * batch : (i + 1) * batch][shard], y[i * batch : (i + 1) * batch][shard]

    if runtime is not None:
        torch_step = TorchStep(runtime, model, model, optimizer, LossCall(loss_fn))
        return lambda: torch_step.whole_step(next_batch())

    def step() -> None:
        xb, yb = next_batch()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _single(job: Job, device: torch.device, *, data_parallel: bool = False) -> tuple[Timing, torch.Tensor]:
    model, optimizer, x, y = _setup(job, device)
    forward = nn.DataParallel(model) if data_parallel else model
    step = _stepper(forward, optimizer, x, y, job.global_batch, slice(None))
    timing = measure(step, device=accelerator(device), warmup=job.warmup, repeats=job.steps - job.warmup)
    return timing, _params(model)


def _params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in model.parameters()])


def _threads_per_process(world: int) -> int:
    return max(1, usable_cores() // world)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_ddp(job: Job, world: int, timeout_s: float) -> tuple[tuple[float, ...], torch.Tensor]:
    """Run ``_ddp_worker`` in ``world`` fresh processes; rank 0's step times and final parameters."""
    context = mp.start_processes(
        _ddp_worker, args=(world, _free_port(), job), nprocs=world, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=1.0):  # raises ProcessRaisedException when a rank fails
        if time.monotonic() > deadline:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
            raise TimeoutError(f"DDP processes did not finish within {timeout_s:g} s")
    saved = torch.load(Path(job.out_dir) / "rank0.pt", weights_only=True)
    return tuple(saved["samples"].tolist()), saved["params"]


def _ddp_worker(rank: int, world: int, port: int, job: Job) -> None:
    """One rank of gpulab's DDP strategy (the Runtime a Trainer would use): join the group as torchrun
    would have it, take this rank's share of every global batch, time the steps."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank)}
    os.environ.update(env, WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    cuda = job.device_type == "cuda"
    if not cuda:
        torch.set_num_threads(_threads_per_process(world))
    # The optimizer as given, so the ranks run the very kernels the single process compared with runs.
    with Runtime("cuda" if cuda else "cpu", "fp32", "ddp", fuse_optimizer=False) as rt:
        model, optimizer, x, y = _setup(job, rt.device)
        ddp, optimizer = rt.setup(model, optimizer)
        local = job.global_batch // world
        step = _stepper(ddp, optimizer, x, y, job.global_batch, slice(rank * local, (rank + 1) * local), rt)
        timing = measure(step, device=rt.accelerator, warmup=job.warmup, repeats=job.steps - job.warmup)
        rt.barrier()
        if rt.is_rank_zero:
            saved = {"samples": torch.tensor(timing.samples, dtype=torch.float64), "params": _params(model)}
            torch.save(saved, Path(job.out_dir) / "rank0.pt")
    exit_without_teardown(0)  # a finished rank: see there why
