"""`gpulab doctor [--json] [--peak]`: check the environment; exit 1 when a check fails."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpulab import engine_registry as engines
from gpulab.cli.console import make_console
from gpulab.hardware.doctor import Report
from gpulab.hardware.doctor import run_doctor as machine_doctor
from gpulab.hardware.facts import Facts

_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}


def _fmt_bytes(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


def render(report: Report, console: Console) -> None:
    devices = Table(title="Devices", title_justify="left")
    for col in ("device", "name", "memory", "compute cap.", "SMs"):
        devices.add_column(col)
    for d in report.facts.devices:
        devices.add_row(
            d.spec,
            d.name,
            _fmt_bytes(d.memory_total_bytes),
            d.compute_capability or "-",
            str(d.sm_count or "-"),
        )
    console.print(devices)

    checks = Table(title="Checks", title_justify="left")
    for col in ("check", "status", "detail", "fix"):
        checks.add_column(col, overflow="fold")
    for c in report.checks:
        # Text, not markup: a fix like `pip install 'gpulab[tensorflow]'` must print its brackets.
        checks.add_row(c.name, Text(c.status, style=_STYLE[c.status]), Text(c.detail), Text(c.fix or ""))
    console.print(checks)


def run_doctor(facts: Facts | None = None) -> Report:
    """The machine's checks, then those of each engine with a doctor capability, on facts gathered once."""
    doctors = [d for d in (engines.offered(engines.get(n), "doctor") for n in engines.names()) if d]
    return machine_doctor(facts, lambda f: [c for d in doctors for c in d.checks(f)])


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (see the README) instead."),
    peak: bool = typer.Option(
        False, "--peak", help="Also time a matrix product on the auto-selected device."
    ),
) -> None:
    """Check that this machine is right for training.

    Checks torch against the GPUs present, CUDA runtime and driver, CUDA_VISIBLE_DEVICES, NCCL, shared
    memory, threads and a compute sanity check on every device, then each engine's own checks (TensorFlow:
    version, build, GPUs, XLA, when installed), and prints the fix for what is not right. Exit 1 when a
    check fails.
    """
    report = run_doctor()
    out = report.to_json()
    console = make_console()
    if peak:
        out["peak"] = _measure_peaks()
    if as_json:
        print(json.dumps(out, indent=2))
    else:
        render(report, console)
        for p in out.get("peak", []):
            cached = " (cached measurement)" if p["cached"] else ""
            console.print(
                f"measured {p['dtype']} matmul peak on {p['device']} ({p['device_name']}): "
                f"[bold]{p['flops_per_s'] / 1e12:.3f} TFLOP/s[/] (n={p['n']}, median of {p['repeats']})"
                + cached
            )
    if report.failed:
        raise typer.Exit(1)


def _measure_peaks() -> list[dict]:
    from dataclasses import asdict

    from gpulab.hardware.devices import select_device
    from gpulab.hardware.peaks import measure_peak

    device = select_device("auto").device
    dtypes = ("fp32", "tf32", "bf16") if device.startswith("cuda") else ("fp32",)
    return [asdict(measure_peak(device, dtype)) for dtype in dtypes]


def register(app: typer.Typer) -> None:
    app.command()(doctor)
