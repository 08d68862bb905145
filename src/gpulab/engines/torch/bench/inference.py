"""inference: one model served by each runtime -- eager, torch.compile, ExportedProgram, AOTInductor,
ONNX Runtime (CPU, and the CUDA execution provider where present), TorchScript -- across batch sizes.

Each runtime gets the same weights (a seeded built-in model) and the same inputs; artifacts are written
by ``gpulab export``'s own formats and loaded back in their runtimes. A sample is one call, so latency
p50 is the median of the repeats and p99 their 99th percentile; throughput is batch / p50. Setup (export,
compile) is timed apart, as the first call of a compiled model is. The largest difference from eager's
output is kept with every row, so a fast runtime that computes something else shows.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from gpulab.artifact import formats
from gpulab.engines.torch.bench import load_workload
from gpulab.engines.torch.formats.base import Deployable
from gpulab.engines.torch.runtime.compile import compile_model
from gpulab.errors import GpulabError, GpulabWarning
from gpulab.measure.harness import BenchContext
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Figure, Row, SuiteResult

RUNTIMES = ("eager", "compile", "exported", "aoti", "onnxruntime", "onnxruntime-cuda", "torchscript")
PROFILES = {
    "full": {
        "models": ("digits", "chargpt-tiny"),
        "batches": (1, 8, 32, 128, 256),
        "runtimes": RUNTIMES,
        "latency_repeats": 100,
    },
    "quick": {"models": ("digits",), "batches": (1, 16, 64), "runtimes": RUNTIMES, "latency_repeats": 30},
    # Tests: no compiler-backed runtime (torch.compile, AOTI) -- their code generation takes a minute.
    "smoke": {
        "models": ("digits",),
        "batches": (1, 8),
        "runtimes": ("eager", "exported", "onnxruntime", "torchscript"),
        "latency_repeats": 3,
    },
}
Runner = Callable[[torch.Tensor], torch.Tensor]


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    result = SuiteResult(
        title="Inference runtimes",
        description="One model served by each runtime across batch sizes: latency p50/p99 and throughput.",
    )
    work_dir = Path(tempfile.mkdtemp(prefix="gpulab-bench-inference-"))
    try:
        for model in cfg["models"]:
            result.rows += _model_rows(ctx, model, cfg, work_dir, result.notes)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        torch.compiler.reset()
    result.notes.append(
        "Latency: one call per sample (p50 = median, p99 = 99th percentile of the repeats); throughput = "
        "batch / p50. Setup (export, code generation) is in each row's info, not in the timings."
    )
    result.plots.append(_plot(result.rows))
    return result


def _model_rows(ctx: BenchContext, name: str, cfg: dict, work_dir: Path, notes: list[str]) -> list[Row]:
    work = load_workload(name, seed=0)
    inputs = work.inputs[: max(cfg["batches"])]
    if len(inputs) < max(cfg["batches"]):  # fewer samples than the largest batch: repeat them
        inputs = inputs[torch.arange(max(cfg["batches"])) % len(inputs)]
    model = served(work.model, inputs).to(ctx.device).eval()
    inputs = inputs.to(ctx.device)
    with torch.no_grad():
        reference = model(inputs[:1]).float().cpu()
    rows = []
    for runtime in cfg["runtimes"]:
        started = time.perf_counter()
        try:
            runner = _runner(runtime, model, inputs[:2], work_dir / f"{name}-{runtime}", ctx)
        except _Skip as why:
            notes.append(f"{name} {runtime}: skipped ({why}).")
            continue
        except (GpulabError, RuntimeError) as exc:  # a runtime that cannot take this model: said, not fatal
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            notes.append(f"{name} {runtime}: failed to set up ({type(exc).__name__}: {first}).")
            continue
        with torch.no_grad():
            error = float((runner(inputs[:1]).float().cpu() - reference).abs().max())
        setup = time.perf_counter() - started  # includes the first call: code generation happens there
        for batch in cfg["batches"]:
            x = inputs[:batch]
            with torch.no_grad():
                timing = ctx.measure(lambda x=x, run=runner: run(x), repeats=cfg["latency_repeats"])
            ms = [s * 1e3 for s in timing.samples]
            figures = {
                "latency_p50": Figure.from_samples(ms, "ms", "lower"),
                "latency_p99": Figure.single(_percentile(ms, 0.99), "ms", "lower"),
                "throughput": timing.rate(batch, "samples/s"),
            }
            info = {"setup_s": round(setup, 3), "max_abs_diff_vs_eager": error}
            rows.append(Row({"model": name, "runtime": runtime, "batch": batch}, figures, info))
    return rows


def served(model: torch.nn.Module, inputs: torch.Tensor) -> Deployable:
    """The model as ``gpulab export`` serves it (``engines/torch/export.deployable``): its signature
    (``runtime/signature.py``) decides how it is called and which part of its output is the prediction."""
    from gpulab.artifact.data import Named
    from gpulab.engines.torch.export import deployable
    from gpulab.engines.torch.runtime.signature import Signature

    data = Named(names=["input"], inputs=(inputs,), target=None, keyword=False)
    return deployable(model, "fp32", data, Signature(model), (inputs[:2],))


class _Skip(Exception):
    """A runtime this machine does not have (no C++ compiler, no CUDA execution provider)."""


def _runner(runtime: str, model: torch.nn.Module, example: torch.Tensor, stem: Path, ctx) -> Runner:
    if runtime == "eager":
        return model
    if runtime == "compile":
        return compile_model(model)
    fmt = {"onnxruntime": "onnx", "onnxruntime-cuda": "onnx"}.get(runtime, runtime)
    module = formats.get(fmt)
    try:
        module.available()
    except GpulabError as exc:
        raise _Skip(str(exc).split(";")[0]) from None
    if runtime == "onnxruntime-cuda" and "CUDAExecutionProvider" not in module.providers(cuda=True):
        raise _Skip("onnxruntime has no CUDA execution provider here")
    path = stem.with_name(stem.name + module.SUFFIX)
    # ONNX is exported from a CPU copy: ONNX Runtime is fed host arrays either way.
    source = model if fmt != "onnx" else _cpu_copy(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", GpulabWarning)  # TorchScript's deprecation: meant for export users
        module.write(source, (example.cpu() if fmt == "onnx" else example,), True, path)
    if fmt == "onnx":
        run_ort = module.load(path, cuda=runtime == "onnxruntime-cuda")
        return lambda x: run_ort(x.cpu())
    return module.load(path)


def _cpu_copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model).cpu()


def _percentile(xs: list[float], q: float) -> float:
    """The q-quantile, linearly interpolated (statistics.quantiles needs two samples or more)."""
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def _plot(rows: list[Row]) -> Plot:
    throughput = Panel("Throughput", "batch size", "samples/s", xscale="log2", yscale="log")
    latency = Panel("Latency p50", "batch size", "ms", xscale="log2", yscale="log")
    for model, runtime in dict.fromkeys((r.key["model"], r.key["runtime"]) for r in rows):
        where = lambda r, m=model, t=runtime: r.key["model"] == m and r.key["runtime"] == t  # noqa: E731
        label = runtime if len({r.key["model"] for r in rows}) == 1 else f"{model} {runtime}"
        throughput.series.append(series_from_rows(rows, label, "batch", "throughput", where=where))
        latency.series.append(series_from_rows(rows, label, "batch", "latency_p50", where=where))
    return Plot("inference.png", "Inference: each runtime across batch sizes", [throughput, latency])
