"""compile: eager against torch.compile (default, and reduce-overhead = CUDA graphs) per training step.

The first compiled step pays for tracing and code generation; it is timed on its own as the compile
time and kept out of the step time, as the Trainer's clock does. Compilation goes through the project's
``compile_model``, so a backend that fails falls back to eager and is reported as such.

The launch-bound mlp also runs its peer, the seed's loop as a user writes it (``hand_mlp.py``: a
DataLoader, default Adam, each batch copied in the loop), timed per step in the same run; each gpulab row
of that model gets ``vs_hand`` (the loop's step time / the row's: > 1, gpulab is faster).
"""

from __future__ import annotations

import time

import torch

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.engines.torch.bench.hand_mlp import SeedLoop
from gpulab.engines.torch.runtime.compile import compile_model
from gpulab.engines.torch.runtime.memory import synchronize
from gpulab.measure import bench_profiles
from gpulab.measure.harness import BenchContext
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult

# variant -> (mode, backend); None is eager.
VARIANTS: dict[str, tuple[str | None, str] | None] = {
    "eager": None,
    "default": (None, "inductor"),
    "reduce-overhead": ("reduce-overhead", "inductor"),
}
PROFILES = bench_profiles.COMPILE
HAND = "hand-written"  # the peer: the seed's loop (hand_mlp.py)
HAND_LOOPS = {"mlp"}  # the models whose loop a user writes by hand is the seed's


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    variants = list(cfg["variants"])
    result = SuiteResult(
        title="torch.compile",
        description="Training step eager against torch.compile; compile time (the first step) shown apart.",
    )
    if not ctx.on_gpu and cfg.get("cpu_skip") and "reduce-overhead" in variants:
        variants.remove("reduce-overhead")
        result.notes.append("reduce-overhead (CUDA graphs) skipped: there are no CUDA graphs on a CPU.")
    elif not ctx.on_gpu and "reduce-overhead" in variants:
        result.notes.append("On a CPU reduce-overhead has no CUDA graphs to use: it compiles like default.")
    if cfg["backend"] != "inductor":
        result.notes.append(f"Backend {cfg['backend']} (no code generation) keeps this profile fast.")
    for model in cfg["models"]:
        hand = _hand_row(ctx, model, cfg, result.notes) if model in HAND_LOOPS else None
        rows = [_one(ctx, model, variant, cfg, result.notes) for variant in variants]
        eager = rows[0].figures["step_time"]
        for row in rows[1:]:
            row.figures["speedup_vs_eager"] = Figure.ratio(eager, row.figures["step_time"])
        if hand is not None and "step_time" in hand.figures:
            for row in rows:
                row.figures["vs_hand"] = Figure.ratio(hand.figures["step_time"], row.figures["step_time"])
        result.rows += ([hand] if hand is not None else []) + rows
    result.notes.append(
        "Compile time is the first step, compilation included; Inductor caches generated code on disk, "
        "so a second run compiles faster."
    )
    result.plots.append(_plot(result.rows))
    torch.compiler.reset()
    return result


def _one(ctx: BenchContext, model: str, variant: str, cfg: dict, notes: list[str]) -> Row:
    backend = cfg["backend"]
    torch.compiler.reset()  # each variant compiles from scratch
    spec = VARIANTS[variant]
    work = load_workload(model, seed=0, batch_size=cfg.get("batch_size"))
    forward = None if spec is None else (lambda m: compile_model(m, spec[0], backend))
    with single_runtime(ctx.device, "fp32") as rt:
        stepper = Stepper(work, rt, forward=forward)
        synchronize(ctx.device)
        start = time.perf_counter()
        stepper.step()
        synchronize(ctx.device)
        first = time.perf_counter() - start
        timing = ctx.measure(stepper.step)
    fell_back = bool(getattr(stepper.forward, "fell_back", False))
    if fell_back:
        notes.append(f"{model} {variant}: compilation failed, the step ran eager (see the warning above).")
    figures = {"step_time": timing.seconds("ms"), "samples_per_s": timing.rate(work.batch_size, "samples/s")}
    if spec is not None:
        figures["compile_time"] = Figure.single(first, "s", "lower")
    info = {"backend": "eager" if spec is None else backend, "compiled": spec is not None and not fell_back}
    return Row({"model": model, "variant": variant}, figures, info)


def _hand_row(ctx: BenchContext, model: str, cfg: dict, notes: list[str]) -> Row:
    """The seed's loop on the same data, batch size and initial weights, one iteration of ``for xb, yb in
    loader:`` per timed step (its DataLoader's batching and copy included, as the user's loop pays them);
    a failure is a row with its error, the gpulab rows still run."""
    work = load_workload(model, seed=0, batch_size=cfg.get("batch_size"))
    try:
        loop = SeedLoop(
            work.model.to(ctx.device), work.inputs, work.targets, ctx.device, batch_size=work.batch_size
        )
        batches = loop.batches()
        timing = ctx.measure(lambda: loop.next_step(batches))
    except Exception as exc:
        line = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
        notes.append(f"{model} {HAND} failed ({line}); the gpulab rows ran.")
        return Row({"model": model, "variant": HAND}, {}, {"error": line})
    notes.append(
        f"{model} {HAND}: the seed's loop as a user writes it (hand_mlp.py: DataLoader with shuffle, "
        "default Adam, BCEWithLogitsLoss, each batch copied in the loop), its loader included in each "
        "step; vs_hand = its step time / the row's (> 1: gpulab is faster)."
    )
    figures = {"step_time": timing.seconds("ms"), "samples_per_s": timing.rate(work.batch_size, "samples/s")}
    return Row({"model": model, "variant": HAND}, figures, {"backend": "eager", "compiled": False})


def _plot(rows: list[Row]) -> Plot:
    step = Panel("Step time (compile excluded)", "variant", "ms", kind="bar")
    compile_panel = Panel("Compile time (first step)", "variant", "s", kind="bar")
    for model in dict.fromkeys(r.key["model"] for r in rows):
        where = lambda r, m=model: r.key["model"] == m  # noqa: E731
        step.series.append(series_from_rows(rows, model, "variant", "step_time", where=where))
        compile_panel.series.append(series_from_rows(rows, model, "variant", "compile_time", where=where))
    return Plot("compile.png", "torch.compile against eager", [step, compile_panel])
