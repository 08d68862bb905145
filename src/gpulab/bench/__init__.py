"""``gpulab bench``: the classic GPU experiments as one reproducible report.

run_bench = resolve the device -> record the environment -> run each suite (harness: warm-up, sync,
repeats, median and spread) -> draw its plots -> write results.json after every suite -> report.html.

``SUITES`` is the registry: name -> ``run(ctx) -> SuiteResult``, in run order. It is built on first use
because it imports torch and every suite: ``gpulab bench compare`` only reads JSON and starts without.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulab.bench.environment import environment
from gpulab.bench.report import write_report
from gpulab.engines import get as get_engine
from gpulab.errors import ConfigError, GpulabError, choices
from gpulab.hardware.load import BUSY_FRACTION as BUSY_WARNING  # others' share before a suite says so
from gpulab.measure.plots import matplotlib_missing, render
from gpulab.measure.results import SuiteResult, gpu_readings, new_document, write_results

SUITE_NAMES = (
    "matmul",
    "precision",
    "memory",
    "accumulate",
    "compile",
    "parallel",
    "transfer",
    "inference",
    "transformer",
)
PROFILE_NAMES = ("full", "quick", "smoke")


def __getattr__(name: str) -> Any:
    if name == "SUITES":
        registry = {n: importlib.import_module(f"gpulab.engines.torch.bench.{n}").run for n in SUITE_NAMES}
        globals()["SUITES"] = registry  # built once; a test may replace it
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _suites() -> dict[str, Any]:
    return sys.modules[__name__].SUITES  # through __getattr__ the first time


@dataclass
class BenchConfig:
    """What ``gpulab bench`` was asked for. ``profile``: full | quick | smoke (tiny, for tests)."""

    suites: list[str] = field(default_factory=list)  # empty: all of them
    profile: str = "full"
    device: str = "auto"
    out_dir: Path = Path("runs/bench")
    repeats: int | None = None
    warmup: int | None = None
    memory_limit_mib: int | None = None
    threads: int | None = None  # torch's CPU threads; None leaves torch's default
    engines: list[str] = field(default_factory=lambda: ["torch"])  # torch, tensorflow, or both in order

    def engine_names(self) -> list[str]:
        from gpulab.config import ENGINES

        unknown = [e for e in self.engines if e not in ENGINES]
        if unknown or not self.engines:
            raise ConfigError(
                f"unknown bench engine {(unknown or [''])[0]!r}; valid choices: {choices(ENGINES)} "
                "(comma-separated for both, e.g. --engine torch,tensorflow)"
            )
        return list(dict.fromkeys(self.engines))

    def suite_names(self) -> list[str]:
        known = _suites()
        unknown = [s for s in self.suites if s not in known]
        if unknown:
            raise ConfigError(f"unknown bench suite {unknown[0]!r}; valid choices: {choices(known)}")
        if self.profile not in PROFILE_NAMES:
            raise ConfigError(
                f"unknown bench profile {self.profile!r}; valid choices: {choices(PROFILE_NAMES)}"
            )
        return list(dict.fromkeys(self.suites)) or list(known)


def run_bench(config: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the suites, writing ``out_dir/results.json`` (after each suite), plots and ``report.html``."""
    import torch

    from gpulab.hardware.devices import select_device

    names = config.suite_names()
    for name in config.engine_names():
        get_engine(name).check_bench()
    device = torch.device(select_device(config.device).device)
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads or threads)
    try:
        return _run_all(config, names, device, log)
    finally:
        torch.set_num_threads(threads)  # a library call leaves the process as it found it


def _run_all(config: BenchConfig, names: list[str], device: Any, log: Callable[[str], None]) -> dict:
    from gpulab.measure.harness import MIB, PROFILES, BenchContext

    defaults = PROFILES[config.profile]
    ctx = BenchContext(
        device=device,
        profile=config.profile,
        warmup=defaults["warmup"] if config.warmup is None else config.warmup,
        repeats=defaults["repeats"] if config.repeats is None else config.repeats,
        memory_limit_bytes=None if config.memory_limit_mib is None else config.memory_limit_mib * MIB,
        log=log,
    )
    engines = config.engine_names()
    settings = {**asdict(config), "out_dir": str(config.out_dir), "suites": names, "device": str(device)}
    settings |= {"warmup": ctx.warmup, "repeats": ctx.repeats, "engines": engines}
    doc = new_document(settings, environment(device))
    out = Path(config.out_dir)
    for engine in engines:
        get_engine(engine).bench(names, ctx, config, doc, out, log)
    if len(engines) > 1:
        from gpulab.bench.versus import add_comparison

        add_comparison(doc, out)
    write_results(doc, out)
    write_report(doc, out)
    return doc


def run_torch_suites(
    names: list[str], ctx: Any, config: BenchConfig, doc: dict, out: Path, log: Callable
) -> None:
    """The torch engine's side (``gpulab.engines.torch``): every suite in this process."""
    for name in names:
        log(f"[{name}] running on {ctx.device} ({config.profile})")
        doc["suites"][name] = _run_suite(name, ctx, out)
        suite = doc["suites"][name]
        log(f"[{name}] {suite['status']}: {len(suite['rows'])} rows in {suite['seconds']:.1f} s")
        write_results(doc, out)


def _run_suite(
    name: str, ctx: Any, out: Path, suite_run: Callable | None = None, engine: str = "torch"
) -> dict:
    """One suite, its failure kept to itself; every row and the suite say which ``engine`` ran them."""
    from gpulab.hardware.load import OtherCpuLoad

    others = OtherCpuLoad()
    start = time.perf_counter()
    try:
        result = (suite_run or _suites()[name])(ctx)
        status = "ok"
    except GpulabError:
        raise  # a user's mistake (a device that is not there...): one line from the CLI
    except Exception as exc:  # a failing suite must not lose the others' results
        result = SuiteResult(
            title=name, notes=[f"FAILED: {type(exc).__name__}: {exc}", traceback.format_exc()]
        )
        status = "error"
    busy = others.fraction()
    if busy is not None and busy > BUSY_WARNING:
        result.notes.append(
            f"Other processes used {busy:.0%} of this machine's CPU time while this suite ran: CPU figures "
            "are slower and noisier than on an idle machine; multi-threaded kernels suffer most, as their "
            "threads wait for each other (--threads 1 gives steadier numbers)."
        )
    missing = matplotlib_missing()
    if missing:
        result.notes.append(missing)
    else:
        for plot in result.plots:
            render(plot, out)
    for row in result.rows:
        row.info["engine"] = engine
    suite = {**result.to_json(), "engine": engine, "status": status}
    suite["seconds"] = round(time.perf_counter() - start, 3)
    suite["cpu_used_by_others"] = None if busy is None else round(busy, 3)
    if ctx.on_gpu:
        suite["gpu_readings"] = gpu_readings()  # clocks and power just after the load
    return suite
