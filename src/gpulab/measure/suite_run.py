"""One bench suite run as every engine runs it: its failure kept to itself (the others still run), a note
when other processes took the CPU meanwhile, its plots drawn, every row tagged with the engine, and the
GPU's NVML readings just after the load."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.hardware.load import BUSY_FRACTION as BUSY_WARNING  # others' share before a suite says so
from gpulab.measure.plots import matplotlib_missing, render
from gpulab.measure.results import SuiteResult, gpu_readings

# The suites of ``gpulab bench``, in run order (each engine runs those it has).
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


def run_suite(name: str, ctx: Any, out: Path, suite_run: Callable[[Any], SuiteResult], engine: str) -> dict:
    """One suite, its failure kept to itself; every row and the suite say which ``engine`` ran them."""
    from gpulab.hardware.load import OtherCpuLoad

    others = OtherCpuLoad()
    start = time.perf_counter()
    try:
        result = suite_run(ctx)
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
