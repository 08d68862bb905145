"""``gpulab profile``: where one training step's time goes, measured three ways on one instrumented loop.

The step is the Trainer's own (``train/step.py``'s ``TorchStep``: the same loss, backward, clipping and
optimizer step), fed batches in turn, with its phase hook marking data -> forward -> backward ->
communication -> optimizer, so every phase can be timed on its own:

1. warm-up steps, not timed (allocator, autotuning, compilation, the data pipeline filling);
2. timed steps: ``PhaseTimer`` marks each phase (CUDA events on a GPU, synchronised ``perf_counter``
   elsewhere) while ``NvmlSampler`` reads GPU utilisation; the breakdown is the mean per phase, and
   ``idle`` is the rest of the step, so the parts add up to the step;
3. profiled steps under ``torch.profiler`` (CPU and CUDA activities, a ``schedule`` with one warm-up
   step), written to ``trace.json`` (Perfetto / chrome://tracing) and ``key_averages.txt``. They are
   separate from the timed steps because the profiler's own overhead would inflate the breakdown.

With several processes the gradients are reduced *after* backward (``no_sync`` then one flat
all-reduce) so that the collective is timed as ``communication``; a real DDP run overlaps it with
backward, so the profile shows its cost, not what remains after overlap. Strategies that shard state
(FSDP2) keep their collectives inside forward and backward, and ``communication`` reads 0.

FLOPs of the step come from ``flops.training_step_flops`` (fake tensors: the run is not disturbed), MFU
against the datasheet and measured peaks, and the bound from ``diagnosis.diagnose``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from gpulab.artifact.ownership import claim_output_folder
from gpulab.engines.torch.data import make_loader
from gpulab.engines.torch.data.transfer import map_tensors
from gpulab.engines.torch.measure.flops import device_peaks, training_step_flops
from gpulab.engines.torch.measure.timers import PHASES, PhaseTimer, phase_timer
from gpulab.engines.torch.runtime.memory import memory_snapshot, memory_stats, reset_peak_memory, synchronize
from gpulab.engines.torch.runtime.memory_format import channels_last_batch
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import LossCall, check_batch
from gpulab.engines.torch.train.step import TorchStep, no_mark
from gpulab.errors import DataError
from gpulab.hardware.load import machine_load
from gpulab.hardware.native_dtypes import native_dtypes
from gpulab.measure.diagnosis import diagnose
from gpulab.measure.profile_report import PROFILE_FILE, ProfileOptions, ProfileResult, write_json
from gpulab.measure.sampler import NvmlSampler

TRACE_FILE = "trace.json"
TABLE_FILE = "key_averages.txt"
SNAPSHOT_FILE = "memory_snapshot.pickle"


def profile_recipe(user: dict[str, Any], out_dir: str | Path, options: ProfileOptions | None = None):
    """Profile the run ``user`` describes (the same settings as ``gpulab train``); write ``out_dir``."""
    from gpulab.engines.torch.runtime import Runtime
    from gpulab.engines.torch.runtime.compile import apply_activation_checkpointing
    from gpulab.engines.torch.runtime.memory_format import resolve_channels_last, to_channels_last
    from gpulab.engines.torch.train.run import resolve_config

    config, recipe = resolve_config(user)
    runtime = Runtime.from_settings(config)  # the Trainer's: fused optimizer, strategy options, ...
    try:
        runtime.seed_everything(config.seed, config.deterministic)
        # The model as the Trainer prepares it, so the profiled step is the trained one.
        apply_activation_checkpointing(recipe.model, config.activation_checkpointing)
        channels_last, why = resolve_channels_last(config.channels_last, recipe.model, runtime.device)
        if channels_last:
            to_channels_last(recipe.model)
        extra = {"recipe": config.recipe, **recipe.info, "channels_last": why}
        if config.activation_checkpointing:
            extra["activation_checkpointing"] = config.activation_checkpointing
        result = profile_loop(
            runtime,
            recipe.model,
            recipe.optimizer,
            recipe.loss_fn,
            recipe.train_data,
            batch_size=config.batch_size,
            out_dir=out_dir,
            options=options,
            seed=config.seed,
            compile=config.compile,
            compile_mode=config.compile_mode,
            compile_backend=config.compile_backend,
            channels_last=channels_last,
            clip_grad_norm=config.clip_grad_norm,
            extra=extra,
        )
    finally:
        runtime.teardown()
    return result


def profile_loop(
    runtime: Any,
    model: torch.nn.Module,
    optimizer: Any,
    loss_fn: Callable,
    data: Any,
    *,
    batch_size: int,
    out_dir: str | Path,
    options: ProfileOptions | None = None,
    seed: int = 0,
    compile: bool = False,
    compile_mode: str | None = None,
    compile_backend: str = "inductor",
    channels_last: bool = False,
    clip_grad_norm: float | None = None,
    extra: dict[str, Any] | None = None,
) -> ProfileResult:
    """Warm up, time, then profile training steps of ``model`` on ``data``; write the results."""
    o = options or ProfileOptions()
    rt, out = runtime, Path(out_dir)
    claim_output_folder(out, "profile")  # a file, or a folder of the user's: refused, untouched
    user_model = model
    model, opt = rt.setup(model, optimizer)
    loss = LossCall(loss_fn, Signature(user_model, None, None))  # the Trainer's rule (runtime/step_call.py)
    forward = model
    if compile:
        from gpulab.engines.torch.runtime.compile import compile_model

        forward = compile_model(model, compile_mode, compile_backend)
        if model is user_model:  # forward and loss as one compiled region, as the Trainer compiles them
            forward.fuse_loss(loss)
    source = make_loader(
        data, batch_size=batch_size, device=rt.device, shuffle=True, seed=seed, rank=rt.rank,
        world_size=rt.world_size,
    )  # fmt: skip
    batches = _cycle(source)
    if channels_last:  # the model was converted by the caller; its 4-D inputs follow, as in the Trainer
        batches = map(channels_last_batch, batches)
    # Gradients reduced after backward (and timed) where the strategy keeps whole gradients per rank.
    separate_comm = rt.world_size > 1 and rt.strategy.checkpoint_layout == "full"
    torch_step = TorchStep(
        rt, model, forward, opt, loss, clip_grad_norm=clip_grad_norm, separate_comm=separate_comm
    )
    step = _Step(torch_step, batches)

    first = next(batches)
    flops = training_step_flops(model, loss_fn, first, autocast=rt.autocast)
    for _ in range(o.warmup):
        step.run(None)

    timer = phase_timer(rt.device)
    synchronize(rt.device)
    reset_peak_memory(rt.device)
    with NvmlSampler(rt.device, o.nvml_interval_s) as sampler:
        for _ in range(o.steps):
            step.run(timer)
        timer.finish()
    nvml = sampler.summary()
    memory = memory_stats(rt.device)
    fixed = _fixed_cost(step, first, rt.device)

    files = _profiled_steps(step, rt, out, o)
    breakdown = timer.summary()
    report = _report(rt, breakdown, timer, flops, batch_size, memory, nvml, fixed, o, compile, extra)
    if rt.is_rank_zero:
        files["profile"] = str(out / PROFILE_FILE)
        write_json(out / PROFILE_FILE, {**report, "files": files})
    return ProfileResult(report, out, files)


class _Step:
    """The Trainer's step (``TorchStep``) on the next batch of the data, its phases marked on the timer."""

    def __init__(self, torch_step: TorchStep, batches: Iterator[Any]) -> None:
        self.torch_step, self.batches = torch_step, batches

    def run(self, timer: PhaseTimer | None, batch: Any = None) -> None:
        """One step; on ``batch`` if given, else on the next batch of the data (``timer`` None: untimed)."""
        step = self.torch_step
        if timer is None:
            step.mark = no_mark
            step.whole_step(check_batch(next(self.batches) if batch is None else batch))
            return
        step.mark = timer.mark
        timer.start_step()
        timer.mark("data")
        step.whole_step(check_batch(next(self.batches) if batch is None else batch))
        timer.end_phase()


def _fixed_cost(step: _Step, batch: Any, device: torch.device, repeats: int = 5) -> float:
    """Median seconds of a step on one sample: the cost every step pays whatever its size (Python,
    operator dispatch, kernel launches, the optimizer over every parameter). Close to the full step's
    time, it means the step is too small for the framework's overhead: host-bound."""
    one = map_tensors(lambda t: t[:1] if t.dim() > 0 else t, check_batch(batch))
    step.run(None, one)  # a new shape may need its own warm-up (kernels, compilation)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        step.run(None, one)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _profiled_steps(step: _Step, rt, out: Path, o: ProfileOptions) -> dict[str, str]:
    from torch.profiler import ProfilerActivity, profile, schedule

    acc = rt.accelerator
    if acc.profiler_activity is None:
        # Kineto prints "USDT: ... profiler_start/stop" at every level below 6, the level that also hides
        # its errors: so only where no CUPTI error can matter. A level the user set is kept.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    activities = [ProfilerActivity.CPU]
    if acc.profiler_activity is not None:
        activities.append(getattr(ProfilerActivity, acc.profiler_activity))
    suffix = "" if rt.rank == 0 else f".rank{rt.rank}"
    trace = out / f"trace{suffix}.json"
    table = out / f"key_averages{suffix}.txt"
    sort = f"self_{(acc.profiler_activity or 'CPU').lower()}_time_total"

    def on_ready(prof) -> None:
        prof.export_chrome_trace(str(trace))
        table.write_text(prof.key_averages().table(sort_by=sort, row_limit=40) + "\n")

    snapshot = out / (SNAPSHOT_FILE if rt.rank == 0 else f"memory_snapshot{suffix}.pickle")
    record = o.memory_snapshot and acc.memory_snapshot
    with (
        memory_snapshot(rt.device, snapshot) if record else nullcontext(),
        profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=max(1, o.active), repeat=1),
            on_trace_ready=on_ready,
            record_shapes=o.record_shapes,
            with_stack=o.with_stack,
        ) as prof,
    ):
        for _ in range(1 + max(1, o.active)):
            step.run(None)
            prof.step()
    synchronize(rt.device)
    files = {"trace": str(trace), "key_averages": str(table)}
    if record:
        files["memory_snapshot"] = str(snapshot)
    return files


def _report(rt, breakdown, timer, flops, batch_size, memory, nvml, fixed, o, compiled, extra) -> dict:
    step_s = breakdown.get("step", 0.0)
    kept = timer.kept_steps()  # the steps the breakdown's means are of, so the median is of them too
    step_median = statistics.median(s["step"] for s in kept) if kept else 0.0
    fixed_fraction = min(1.0, fixed / step_median) if step_median > 0 else None
    precision = rt.precision.name
    peaks = device_peaks(rt.device, precision, measure=o.measure_peak)
    flops_per_step = flops.per_sample * batch_size  # per rank, at the configured batch
    achieved = flops_per_step / step_s if step_s > 0 else None
    peaks, peak_note = peaks.within_peak(achieved)  # MFU never above 100 % of the figure it divides by
    mfu = peaks.mfu(achieved)
    util = nvml.gpu_utilization_pct if nvml.available else None
    diag = diagnose(
        breakdown,
        device_type=rt.device.type,
        gpu_utilization_pct=util,
        memory_peak_fraction=memory.peak_fraction if memory.kind == "allocator" else None,
        mfu=mfu["mfu_measured"],
        fixed_cost_fraction=fixed_fraction,
        precision=precision,
        compiled=compiled,
        native=native_dtypes(rt.device),
    )
    parts = sum(breakdown.get(k, 0.0) for k in (*PHASES, "idle"))
    from gpulab.engines.torch.train.run import environment

    return {
        **(extra or {}),
        **rt.describe(),
        "batch_size": batch_size,
        "warmup_steps": o.warmup,
        "timed_steps": o.steps,
        "profiled_steps": o.active,
        "breakdown_s": breakdown,
        "breakdown_fraction": {k: v / step_s for k, v in breakdown.items() if k != "step"} if step_s else {},
        "breakdown_sum_s": parts,
        "step_s_median": step_median,
        "step_s_mean_all": statistics.fmean(s["step"] for s in timer.steps) if timer.steps else 0.0,
        "outlier_steps": timer.outliers(),
        "fixed_cost_s": fixed,
        "fixed_cost_fraction": fixed_fraction,
        "samples_per_s": batch_size * rt.world_size / step_s if step_s > 0 else None,
        "flops_per_step": flops_per_step,
        "flops_per_sample": flops.per_sample,
        "flops_method": flops.method,
        "achieved_flops_per_s": achieved,
        "peaks": {**peaks.to_json(), **({"note": peak_note} if peak_note else {})},
        **mfu,
        "memory": memory.to_json(),
        "nvml": nvml.to_json(),
        "diagnosis": diag.to_json(),
        "timer": rt.accelerator.kernel_timer,
        "machine_load": machine_load(),
        "environment": environment(),
        "date_unix": time.time(),
    }


def _cycle(source) -> Iterator[Any]:
    """Batches forever, epoch after epoch."""
    epoch = 0
    while True:
        source.set_epoch(epoch)
        empty = True
        for batch in source:
            empty = False
            yield batch
        if empty:
            raise DataError("the training data gives no batch (empty, or smaller than the batch size)")
        epoch += 1
