"""The torch engine's side of ``gpulab bench``: every suite in this process. ``SUITES`` maps each suite
name to its ``run(ctx) -> SuiteResult`` (the modules beside this one), built on first use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.engines.torch.train import NAME
from gpulab.measure.results import write_results
from gpulab.measure.suite_run import SUITE_NAMES, run_suite


def __getattr__(name: str) -> Any:
    if name == "SUITES":
        registry = {n: importlib.import_module(f"gpulab.engines.torch.bench.{n}").run for n in SUITE_NAMES}
        globals()["SUITES"] = registry  # built once; a test may replace it
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def suites() -> dict[str, Callable]:
    return sys.modules[__name__].SUITES  # through __getattr__ the first time


def run_torch_suites(names: list[str], ctx: Any, config: Any, doc: dict, out: Path, log: Callable) -> None:
    """The torch engine's side (``gpulab.engines.torch``): every suite in this process."""
    from gpulab.engines.torch.devices import accelerator

    if ctx.accelerator is None and ctx.device is not None:
        ctx.accelerator = accelerator(ctx.device)  # what the harness asks of the device
    if ctx.variants and "transformer" in names:  # a typo is told before any suite runs
        from gpulab.engines.torch.bench.transformer import check_variants

        check_variants(ctx.variants)
    for name in names:
        log(f"[{name}] running on {ctx.device} ({config.profile})")
        doc["suites"][name] = run_suite(name, ctx, out, suites()[name], engine=NAME)
        suite = doc["suites"][name]
        log(f"[{name}] {suite['status']}: {len(suite['rows'])} rows in {suite['seconds']:.1f} s")
        write_results(doc, out)


def bench_environment() -> dict[str, Any]:
    """The torch side's part of results.json's environment: versions, threads, devices."""
    import torch

    from gpulab.engines.torch.train.run import environment as run_environment
    from gpulab.hardware.devices import discover

    return run_environment() | {
        "torch_threads": torch.get_num_threads(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "devices": [d.to_json() for d in discover()],
    }
