"""``gpulab bench``: the classic GPU experiments as one reproducible report.

run_bench = resolve the device -> record the environment -> run each suite (harness: warm-up, sync,
repeats, median and spread) -> draw its plots -> write results.json after every suite -> report.html.

``SUITE_NAMES`` are the suites, in run order; each engine runs its side of them
(``engines.get(name).bench``: engines/torch/bench/run.py, engines/tensorflow/bench/launch.py) through the
same ``measure.suite_run.run_suite``. ``gpulab bench compare`` only reads JSON and starts without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulab.artifact.ownership import claim_output_folder
from gpulab.bench.environment import environment
from gpulab.bench.report import write_report
from gpulab.engine_registry import DEFAULT, capability
from gpulab.engine_registry import get as get_engine
from gpulab.errors import ConfigError, choices
from gpulab.measure.results import new_document, write_results
from gpulab.measure.suite_run import SUITE_NAMES

PROFILE_NAMES = ("full", "quick", "smoke")


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
    engines: list[str] = field(default_factory=lambda: [DEFAULT])  # torch, tensorflow, or both in order
    variants: list[str] = field(default_factory=list)  # the transformer suite's rows to run; empty: all

    def engine_names(self) -> list[str]:
        from gpulab.engine_registry import names

        unknown = [e for e in self.engines if e not in names()]
        if unknown or not self.engines:
            raise ConfigError(
                f"unknown bench engine {(unknown or [''])[0]!r}; valid choices: {choices(names())} "
                "(comma-separated for both, e.g. --engine torch,tensorflow)"
            )
        return list(dict.fromkeys(self.engines))

    def suite_names(self) -> list[str]:
        known = SUITE_NAMES
        unknown = [s for s in self.suites if s not in known]
        if unknown:
            raise ConfigError(f"unknown bench suite {unknown[0]!r}; valid choices: {choices(known)}")
        if self.profile not in PROFILE_NAMES:
            raise ConfigError(
                f"unknown bench profile {self.profile!r}; valid choices: {choices(PROFILE_NAMES)}"
            )
        if self.variants and "transformer" not in self.suites:
            raise ConfigError(
                "--variants picks rows of the transformer suite: name it (gpulab bench transformer "
                "--variants hand-written,compile)"
            )
        return list(dict.fromkeys(self.suites)) or list(known)


def run_bench(config: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the suites, writing ``out_dir/results.json`` (after each suite), plots and ``report.html``."""
    names = config.suite_names()
    for bench in map(_bench, config.engine_names()):
        bench.check()
    if not any(_bench(name).in_process for name in config.engine_names()):
        # every engine benches in a worker that picks its device: no torch in this process
        return _run_all(config, names, config.device, log)
    import torch

    from gpulab.hardware.devices import select_device

    device = torch.device(select_device(config.device).device)
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads or threads)
    try:
        return _run_all(config, names, device, log)
    finally:
        torch.set_num_threads(threads)  # a library call leaves the process as it found it


def _bench(engine: str) -> Any:
    """The engine's bench capability (one line naming the engines that bench, where it has none)."""
    return capability(get_engine(engine), "bench")


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
        variants=tuple(config.variants) or None,
    )
    engines = config.engine_names()
    settings = {**asdict(config), "out_dir": str(config.out_dir), "suites": names, "device": str(device)}
    settings |= {"warmup": ctx.warmup, "repeats": ctx.repeats, "engines": engines}
    in_process = [b for b in map(_bench, engines) if b.in_process]
    doc = new_document(settings, environment(device, in_process))
    out = claim_output_folder(Path(config.out_dir), "bench")  # a folder of the user's is refused, untouched
    for engine in engines:
        _bench(engine).run(names, ctx, config, doc, out, log)
    if len(engines) > 1:
        from gpulab.bench.versus import add_comparison

        add_comparison(doc, out, (engines[0], engines[1]))  # the first two side by side
    write_results(doc, out)
    write_report(doc, out)
    return doc
