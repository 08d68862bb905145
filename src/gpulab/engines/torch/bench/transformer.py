"""transformer: a GPT-2-small training step (the chargpt model at GPT-2-small size) as tokens/s, step time
and MFU, eager against torch.compile, the whole step as one CUDA graph and Float8.

On a GPU the model is GPT-2-small (12 layers, 12 heads, 768 wide, 1024 context, vocabulary 50304) in
bf16-mixed; on a CPU, where one such step takes tens of seconds, a tiny one in fp32. The batches are random
token ids: the step's speed does not depend on the text. FLOPs are counted once (``measure.flops``, fake
tensors) and MFU is taken against the peak of the precision's peak dtype (``precisions.py``): the datasheet
figure where the part is known, and the matmul measured here (``hardware.peaks``, cached).

The first step of a compiled variant pays for compilation: timed on its own as the compile time and kept
out of the step time, as the Trainer's clock does.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch

from gpulab import precisions
from gpulab.engines.torch import torch_private
from gpulab.engines.torch.bench import Stepper, Workload, single_runtime
from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.measure.flops import Peaks, device_peaks, training_step_flops
from gpulab.engines.torch.recipes.chargpt import CharGPT, CharGptOptions, next_char_loss
from gpulab.engines.torch.runtime.compile import compile_model
from gpulab.engines.torch.runtime.cuda_graph import CudaGraphs
from gpulab.engines.torch.runtime.memory import synchronize
from gpulab.engines.torch.runtime.recompiles import frames_compiled
from gpulab.engines.torch.train.graph_step import WholeStepGraph
from gpulab.errors import ConfigError
from gpulab.measure.harness import (
    BenchContext,
    MemoryReading,
    Timing,
    memory_kind,
    missing_memory_note,
    peak_memory,
)
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab: int
    batch: int


SHAPES = {
    "gpt2-small": Shape(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab=50304, batch=32),
    "tiny": Shape(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab=512, batch=8),
    "micro": Shape(n_layer=1, n_head=2, n_embd=32, block_size=32, vocab=128, batch=4),
}
VARIANTS = (
    "eager", "compile", "compile+opt", "compile+chunked-ce", "compile+max-autotune", "cuda-graph", "float8"
)  # fmt: skip
CHUNKED = "compile+chunked-ce"  # compile with chargpt's chunked_loss=true: the logits never whole
# Inductor's GEMM autotuning alone: without its CUDA graphs, so the row compares with compile's directly.
AUTOTUNE, AUTOTUNE_MODE = "compile+max-autotune", "max-autotune-no-cudagraphs"
HAND = "hand-written"  # the peer: a GPT-2 loop as a user writes it by hand (hand_gpt2.py)
PROFILES = {
    "full": {"gpu": "gpt2-small", "cpu": "tiny", "warmup": 5, "repeats": 10, "backend": "inductor"},
    # quick leaves max-autotune out: its tuning adds minutes, more than gpu_measure.sh's transformer step has
    "quick": {"gpu": "gpt2-small", "cpu": "tiny", "warmup": 3, "repeats": 5, "backend": "inductor",
              "without": (AUTOTUNE,)},
    # aot_eager: no code generation, so the test of the compiled path takes seconds, not a minute.
    "smoke": {"gpu": "micro", "cpu": "micro", "warmup": 1, "repeats": 2, "backend": "aot_eager"},
}  # fmt: skip
BATCHES = 4  # distinct batches the steps take in turn
# A CPU reading sets glibc's mmap threshold for the rest of the process (harness.peak_memory): every later
# large tensor is then mapped and unmapped, which slowed the next variant's steps here (eager tiny: 37 ms
# before a reading, 42-49 ms after). The variants are timed one after another, so no reading on a CPU.
CPU_NO_MEMORY = MemoryReading(
    None, "not read on a CPU, where the reading would slow the variants timed after it (glibc's thresholds)"
)
# A replay allocates nothing: the step's activations live in the graph's private pool, which
# max_memory_allocated after a reset does not see (an H100 read 3.7 GiB where eager's step holds 28 GiB).
GRAPH_NO_MEMORY = MemoryReading(
    None,
    "not read for the whole-step graph: its replays allocate nothing (the graph's private pool holds "
    "the step's memory, which torch's peak counter does not see)",
)


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    shape_name = cfg["gpu"] if ctx.on_gpu else cfg["cpu"]
    shape = SHAPES[shape_name]
    precision = "bf16-mixed" if ctx.on_gpu else "fp32"
    result = SuiteResult(
        title="Transformer training step",
        description=f"The chargpt model at {shape_name} size ({shape.n_layer} layers, {shape.n_head} heads, "
        f"{shape.n_embd} wide, context {shape.block_size}, vocabulary {shape.vocab}), batch {shape.batch}, "
        f"{precision}, fused AdamW: tokens/s, step time and MFU per variant (compile+opt: the optimizer step "
        "compiled too; compile+chunked-ce: the cross-entropy over row chunks, never the whole logits; "
        f"compile+max-autotune: inductor's {AUTOTUNE_MODE}); compile time shown apart.",
    )
    flops, peaks = _flops_and_peaks(ctx, shape, precision)
    for variant in (HAND, *VARIANTS):
        if ctx.variants is not None and variant not in ctx.variants:
            continue  # not asked for (--variants)
        reason = skip_reason(variant, ctx.device, ctx.graphs)
        if reason is None and variant in cfg.get("without", ()) and ctx.variants is None:
            reason = f"not in the {ctx.profile} profile (its autotuning takes minutes: run the full profile)"
        if reason:
            result.notes.append(f"{variant} skipped: {reason}.")
            continue
        args = (ctx, shape_name, shape, variant, precision, cfg, flops, peaks)
        result.rows.append(_isolated(args, result.notes))
    timed = [r for r in result.rows if "step_time" in r.figures]
    peaks = _within_measured_peak(peaks, flops, timed, result.notes)
    _ratios(timed)
    result.notes += _notes(ctx, shape_name, precision, flops, peaks, timed, cfg["backend"])
    if timed:
        result.plots.append(_plot(timed))
    torch.compiler.reset()
    return result


def check_variants(asked: tuple[str, ...]) -> None:
    """One line naming the valid rows where ``--variants`` names one this suite lacks."""
    valid = (HAND, *VARIANTS)
    unknown = [v for v in asked if v not in valid]
    if unknown:
        raise ConfigError(f"unknown transformer variant {unknown[0]!r}; valid choices: {', '.join(valid)}")


def _isolated(args: tuple, notes: list[str]) -> Row:
    """One variant's row, or a row holding its error: one variant's failure never loses the others' (the
    H100 run of 2026-11-26 lost every row to the cuda-graph variant's AttributeError)."""
    ctx, shape_name, variant = args[0], args[1], args[3]
    try:
        return _hand_row(*args) if variant == HAND else _one(*args, notes)
    except Exception as exc:
        if ctx.on_gpu:
            torch.cuda.empty_cache()  # what the failed variant held
        line = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
        notes.append(f"{variant} failed ({line}); the other variants ran.")
        return Row({"model": shape_name, "variant": variant}, {}, {"error": line})


def _ratios(rows: list[Row]) -> None:
    """Each gpulab row's speed-up over eager and its tokens/s over the hand-written loop's (> 1: gpulab is
    faster than writing the loop by hand)."""
    by_variant = {r.key["variant"]: r for r in rows}
    eager, hand = by_variant.get("eager"), by_variant.get(HAND)
    for row in rows:
        if row.key["variant"] == HAND:
            continue
        if eager is not None and row is not eager:
            row.figures["speedup_vs_eager"] = Figure.ratio(
                eager.figures["step_time"], row.figures["step_time"]
            )
        if hand is not None:
            row.figures["vs_hand"] = Figure.ratio(hand.figures["step_time"], row.figures["step_time"])


def skip_reason(variant: str, device: torch.device, graphs: Any = None) -> str | None:
    """Why ``variant`` cannot run on ``device`` (one line), or None when it can. ``graphs``: the cuda-graph
    backend (a CPU test passes a fake that can)."""
    if variant == "cuda-graph" and (graphs or CudaGraphs()).unsupported(device):
        return "CUDA graphs need a CUDA GPU"
    if variant == AUTOTUNE and "max-autotune" not in accelerator(device).compile_modes:
        return (
            "it is for the GPU's Triton GEMM autotuning; on a CPU it would spend minutes tuning C++ GEMMs "
            "that say nothing about a GPU"
        )
    if variant == "float8":
        capability = accelerator(device).compute_capability()
        if capability is None or capability < (9, 0):
            return "Float8 training needs an H100-class GPU (compute capability 9.0 or higher)"
        if importlib.util.find_spec("torchao") is None:
            return "Float8 training needs torchao (pip install torchao)"
    return None


def workload(shape: Shape, seed: int = 0, chunked_loss: bool = False) -> Workload:
    """The chargpt model at ``shape`` (dropout off), AdamW, and ``BATCHES`` batches of random token ids;
    ``chunked_loss``: its cross-entropy chunk by chunk (``options.chunked_loss=true``)."""
    options = CharGptOptions(
        n_layer=shape.n_layer,
        n_head=shape.n_head,
        n_embd=shape.n_embd,
        block_size=shape.block_size,
        dropout=0.0,
        chunked_loss=chunked_loss,
    )
    with torch.random.fork_rng(devices=[]):  # the same weights and batches for every variant
        torch.manual_seed(seed)
        model = CharGPT(shape.vocab, options)
        ids = torch.randint(0, shape.vocab, (BATCHES * shape.batch, shape.block_size + 1))
    return Workload(
        name="transformer",
        model=model,
        loss_fn=next_char_loss,
        # GPT-2's settings; the Runtime puts AdamW on its fused kernel.
        optimizer=lambda params: torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1),
        # contiguous, as a DataLoader's collate makes every batch (a user's `targets.view(-1)` relies on it)
        inputs=ids[:, :-1].contiguous(),
        targets=ids[:, 1:].contiguous(),
        batch_size=shape.batch,
    )


def _flops_and_peaks(ctx: BenchContext, shape: Shape, precision: str) -> tuple[int, Peaks]:
    """FLOPs of one step (forward + backward, traced with fake tensors) and the device's peaks."""
    with torch.device("meta"):  # shapes are all the count needs: no weights initialised, no memory
        work = workload(shape)
    batch = (work.inputs[: shape.batch], work.targets[: shape.batch])
    with single_runtime(ctx.device, precision) as rt:
        count = training_step_flops(work.model, work.loss_fn, batch, autocast=rt.autocast)
    return count.total, device_peaks(ctx.device, precision)


def _one(
    ctx: BenchContext,
    shape_name: str,
    shape: Shape,
    variant: str,
    precision: str,
    cfg: dict,
    flops: int,
    peaks: Peaks,
    notes: list[str],
) -> Row:
    torch.compiler.reset()  # each variant compiles from scratch
    work = workload(shape, chunked_loss=variant == CHUNKED)
    if variant == "float8":
        _to_float8(work.model)
    compiled = variant not in ("eager", "cuda-graph")  # cuda-graph: the eager model, one graph per step
    mode = AUTOTUNE_MODE if variant == AUTOTUNE and cfg["backend"] == "inductor" else None
    forward = (lambda m: compile_model(m, mode, cfg["backend"])) if compiled else None
    info: dict = {"batch": shape.batch, "block_size": shape.block_size, "precision": precision}
    info["chunked_loss"] = work.model.chunked_loss  # the cross-entropy over row chunks (CHUNKED)
    info["compile_mode"] = mode
    with single_runtime(ctx.device, precision) as rt:
        info["attention"] = rt.attention.name  # the SDPA kernel order (auto: torch's)
        stepper = Stepper(work, rt, forward=forward)
        if variant == "cuda-graph":
            stepper = GraphStepper(stepper, ctx.graphs)
        if variant == "compile+opt":
            restore = compile_optimizer_step(stepper.optimizer, cfg["backend"])
        first = _first_step(stepper, ctx.device)
        if variant == "compile+opt" and isinstance(first, BaseException):
            restore()  # the optimizer step runs eager; the model stays compiled
            reason = f"{type(first).__name__}: {str(first).splitlines()[0] if str(first) else ''}"
            notes.append(f"compile+opt: the optimizer step did not compile ({reason}); it ran eager.")
            info["optimizer_compiled"] = False
            first = _first_step(stepper, ctx.device)
        elif variant == "compile+opt":
            info["optimizer_compiled"] = True
        if isinstance(first, BaseException):
            raise first
        if variant == "cuda-graph":
            info["cuda_graph"] = stepper.finish_warmup()  # the capture is not timed, as compilation is not
            if stepper.graph.mode != "graph":
                notes.append(f"cuda-graph: {stepper.graph.reason}")
        frames = frames_compiled()
        timing = ctx.measure(stepper.step, warmup=cfg["warmup"], repeats=cfg["repeats"])
        info["recompiles_after_first_step"] = frames_compiled() - frames if compiled else 0
        memory = _memory(ctx, variant, stepper.step)
    if getattr(stepper.forward, "fell_back", False):
        notes.append(f"{variant}: compilation failed, the model ran eager (see the warning above).")
    info["compiled"] = compiled and not getattr(stepper.forward, "fell_back", False)
    compile_s = first if compiled else None
    return _row(shape_name, shape, variant, info, timing, flops, peaks, compile_s, memory)


def _memory(ctx: BenchContext, variant: str, step: Callable[[], Any]) -> MemoryReading:
    if not ctx.on_gpu:
        return CPU_NO_MEMORY
    if variant == "cuda-graph":
        return GRAPH_NO_MEMORY
    return peak_memory(step, device=ctx.seam, repeats=2)


def _hand_row(ctx, shape_name, shape, variant, precision, cfg, flops, peaks) -> Row:
    """The hand-written loop (``hand_gpt2.py``) at the same shape, precision and batches, timed alike."""
    from gpulab.engines.torch.bench.hand_gpt2 import GPT, make_step

    torch.compiler.reset()
    work = workload(shape)  # only its batches: the peer builds its own model, as a user's script does
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(shape.vocab, shape.block_size, shape.n_layer, shape.n_head, shape.n_embd)
    step = make_step(model, ctx.device, bf16=precision == "bf16-mixed", backend=cfg["backend"])
    x, y = work.inputs.to(ctx.device), work.targets.to(ctx.device)
    cursor = itertools.count()

    def one() -> torch.Tensor:
        i = (next(cursor) % BATCHES) * shape.batch
        return step(x[i : i + shape.batch], y[i : i + shape.batch])

    first = _first_step(SimpleNamespace(step=one), ctx.device)  # compiles
    if isinstance(first, BaseException):
        raise first
    timing = ctx.measure(one, warmup=cfg["warmup"], repeats=cfg["repeats"])
    info = {"batch": shape.batch, "block_size": shape.block_size, "precision": precision, "compiled": True}
    info["attention"] = "auto"  # a user's loop leaves torch's SDPA order as it is
    return _row(shape_name, shape, variant, info, timing, flops, peaks, first, _memory(ctx, variant, one))


def _row(
    shape_name: str, shape: Shape, variant: str, info: dict, timing: Timing, flops: int, peaks: Peaks,
    compile_s: float | None, memory: MemoryReading,
) -> Row:  # fmt: skip
    """A variant's row: step time, tokens/s, MFU, the compile time where it compiled, peak memory or why
    there is none. Achieved TFLOP/s = MFU x the peak in the notes: a column of its own would not fit."""
    figures = {
        "step_time": timing.seconds("ms"),
        "tokens_per_s": timing.rate(shape.batch * shape.block_size, "tokens/s"),
    }
    mfu_figures(figures, timing, flops, peaks)
    if compile_s is not None:
        figures["compile_time"] = Figure.single(compile_s, "s", "lower")
    info["tflop_per_step"] = flops / 1e12
    if memory.figure is not None:
        figures["peak_memory"] = memory.figure
    else:
        info["no_peak_memory"] = memory.kind
    return Row({"model": shape_name, "variant": variant}, figures, info)


class GraphStepper:
    """A ``Stepper``'s step as the Trainer's whole-step CUDA graph (``cuda_graph: true``): the very
    ``WholeStepGraph`` of ``train/graph_step.py``, fed the Stepper's batches in turn."""

    def __init__(self, stepper: Stepper, backend: Any = None) -> None:
        self.stepper = stepper
        self.forward = stepper.forward  # what the suite asks of any stepper (did compilation fall back)
        fit = SimpleNamespace(  # what WholeStepGraph reads from a Trainer
            optimizer=stepper.optimizer,
            runtime=stepper.rt,
            model=stepper.model,
            forward=stepper.forward,
            torch_step=stepper.torch_step,
            scheduler=None,
            settings=SimpleNamespace(clip_grad_norm=None, progress=False),
            state=SimpleNamespace(global_step=0),
        )
        self.graph = WholeStepGraph(fit, backend or CudaGraphs(), auto=False)

    def step(self) -> torch.Tensor:
        s = self.stepper
        start = (s.cursor % s.batches) * s.batch_size
        s.cursor += 1
        batch = (s.inputs[start : start + s.batch_size], s.targets[start : start + s.batch_size])
        return self.graph.step(batch, last_in_epoch=False)

    def finish_warmup(self) -> dict:
        """Step through the remaining warm-up steps and the capture; the graph's counts."""
        while self.graph.mode == "warmup":
            self.step()
        return self.graph.report()


def _within_measured_peak(peaks: Peaks, flops: int, rows: list[Row], notes: list[str]) -> Peaks:
    """The peaks, the measured one re-measured where a row's fastest step beat it (a cached matmul timed on
    a busier machine), each row's ``mfu_measured`` rescaled to it: never over 100 %."""
    fastest = max((flops * 1e3 / r.figures["step_time"].low for r in rows), default=0.0)
    fresh, note = peaks.within_peak(fastest)
    if note is None:
        return peaks
    notes.append(f"Measured peak: {note}.")
    scale = peaks.measured / fresh.measured if fresh.measured else None
    for row in rows:
        old = row.figures.get("mfu_measured")
        if old is None:
            continue
        if scale is None:  # the peak could not be re-measured: no MFU against it
            del row.figures["mfu_measured"]
            continue
        new = replace(old, value=old.value * scale, low=old.low * scale, high=old.high * scale)
        row.figures["mfu_measured"] = new
    return fresh


def mfu_figures(figures: dict, timing: Timing, flops: int, peaks: Peaks) -> None:
    """``mfu`` (datasheet peak) and ``mfu_measured`` (the matmul measured here) in %, where a peak is
    known: one value per repeat, as every rate."""
    for name, peak in (("mfu", peaks.datasheet), ("mfu_measured", peaks.measured)):
        if peak:
            figures[name] = timing.rate(flops * 100 / peak, "%")


class _NoRecordFunctionNotice(logging.Filter):
    """torch wraps every optimizer step in a profiler ``record_function``, which dynamo leaves out of the
    compiled graph and says so on stderr ("Profiler record function ... will be ignored"): torch's own
    notice about its own wrapper, nothing the bench or its reader can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Profiler record function")


_DYNAMO_CTX_LOG = torch_private.dynamo_context_manager_log()


def compile_optimizer_step(optimizer: torch.optim.Optimizer, backend: str) -> Callable[[], None]:
    """``optimizer.step`` replaced by its torch.compile'd self (compiled at its first call); returns the
    function that puts the eager one back."""
    if not any(isinstance(f, _NoRecordFunctionNotice) for f in _DYNAMO_CTX_LOG.filters):
        _DYNAMO_CTX_LOG.addFilter(_NoRecordFunctionNotice())
    eager = optimizer.step
    compiled = torch.compile(eager, backend=backend)
    optimizer.step = compiled  # type: ignore[method-assign]

    def restore() -> None:
        optimizer.step = eager  # type: ignore[method-assign]

    return restore


def _first_step(stepper: Stepper, device: torch.device) -> float | BaseException:
    """Seconds of the first step (compilation included), or the error it raised."""
    synchronize(device)
    start = time.perf_counter()
    try:
        stepper.step()
        synchronize(device)
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:  # a compile failure: the caller decides
        return exc
    return time.perf_counter() - start


def _to_float8(model: torch.nn.Module) -> None:
    """The Linear layers of the blocks as torchao's Float8Linear (dynamic scaling); the output head, tied to
    the embedding, stays bf16. torchao's kernels need both dimensions divisible by 16."""
    from torchao.float8 import convert_to_float8_training

    def eligible(module: torch.nn.Module, name: str) -> bool:
        return (
            isinstance(module, torch.nn.Linear)
            and name.startswith("blocks.")
            and module.in_features % 16 == 0
            and module.out_features % 16 == 0
        )

    convert_to_float8_training(model, module_filter_fn=eligible)


def _notes(
    ctx: BenchContext,
    shape_name: str,
    precision: str,
    flops: int,
    peaks: Peaks,
    rows: list[Row],
    backend: str,
) -> list[str]:
    dtype = precisions.get(precision).peak_dtype
    notes = []
    if not ctx.on_gpu:
        notes.append(
            f"On a CPU the model is {shape_name}, not GPT-2-small (one GPT-2-small step takes tens of "
            "seconds here): run on a GPU for the GPT-2-small figures."
        )
    sheet = f"{peaks.datasheet / 1e12:.4g} TFLOP/s (mfu)" if peaks.datasheet else "none for this part"
    measured = f"{peaks.measured / 1e12:.4g} TFLOP/s (mfu measured)" if peaks.measured else "not measured"
    notes.append(
        f"MFU: the step's forward and backward FLOPs (matmuls and attention, counted once: {flops / 1e9:.4g} "
        f"GFLOP) per second, over the {dtype} peak of {peaks.device_name}: datasheet {sheet}; measured "
        f"matmul {measured}."
    )
    if any(r.key["variant"] == "float8" for r in rows):
        notes.append(
            "float8's MFU is against the same bf16 peak, so it compares directly with the other rows."
        )
    if backend != "inductor":
        notes.append(f"Backend {backend} (no code generation) keeps this profile fast.")
    recompiled = [r.key["variant"] for r in rows if r.info.get("recompiles_after_first_step")]
    if recompiled:
        notes.append(
            f"Recompiled after the first step: {', '.join(recompiled)} (see recompiles in results.json)."
        )
    if any("peak_memory" in r.figures for r in rows):
        notes.append(f"Peak memory: {memory_kind(ctx.seam)}.")
    notes += missing_memory_note(rows, lambda r: r.key["variant"])
    return notes


def _plot(rows: list[Row]) -> Plot:
    model = rows[0].key["model"]
    mfu = "mfu" if any("mfu" in r.figures for r in rows) else "mfu_measured"
    panels = [
        Panel("Tokens per second", "variant", "tokens/s", kind="bar"),
        Panel(f"MFU (of the {'datasheet' if mfu == 'mfu' else 'measured'} peak)", "variant", "%", kind="bar"),
        Panel("Compile time (first step)", "variant", "s", kind="bar"),
    ]
    for panel, figure in zip(panels, ("tokens_per_s", mfu, "compile_time"), strict=True):
        panel.series.append(series_from_rows(rows, model, "variant", figure))
    return Plot("transformer.png", f"Transformer training step ({model})", panels)
