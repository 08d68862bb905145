"""`gpulab profile RECIPE|--config FILE --out DIR`: where a training step's time goes.

Writes DIR/trace.json (open in https://ui.perfetto.dev or chrome://tracing), DIR/key_averages.txt and
DIR/profile.json (breakdown, FLOPs, MFU, memory, GPU utilisation, diagnosis), and prints the breakdown.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpulab import engine_registry as engines
from gpulab import precisions
from gpulab.cli.console import make_console
from gpulab.cli.text import plural
from gpulab.config.layering import layer_settings

_ROWS = (
    ("data", "data wait"),
    ("forward", "forward"),
    ("backward", "backward"),
    ("communication", "communication"),
    ("optimizer", "optimizer"),
    ("idle", "idle"),
)


def profile(
    recipe: str = typer.Argument(
        None, help="mlp|digits|chargpt, or package.module:function (or set in --config)"
    ),
    out: Path = typer.Option(None, "--out", help="Output directory [default: runs/profile-RECIPE]"),
    config: Path = typer.Option(None, "--config", help="YAML file with any settings (flags override it)"),
    device: str = typer.Option(None, help="auto|cpu|cuda|cuda:N|mps|xpu"),
    precision: str = typer.Option(None, help=precisions.HELP),
    batch_size: int = typer.Option(None, "--batch-size", help="Samples per step (per device)"),
    compile: bool = typer.Option(None, "--compile/--no-compile", help="torch.compile the model"),
    seed: int = typer.Option(None, help="Random seed"),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Untimed steps first"),
    steps: int = typer.Option(10, "--steps", min=1, help="Timed steps (the breakdown)"),
    active: int = typer.Option(3, "--active", min=1, help="Steps recorded by torch.profiler"),
    peak: bool = typer.Option(True, "--peak/--no-peak", help="Measure this device's matmul peak for MFU"),
    memory_snapshot: bool = typer.Option(
        False,
        "--memory-snapshot",
        help="CUDA: also write DIR/memory_snapshot.pickle for pytorch.org/memory_viz",
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        help=engines.option_help(),
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Any other setting (repeatable)"),
) -> None:
    """Time and profile training steps: where a step's time goes.

    Writes DIR/trace.json (Perfetto or chrome://tracing), DIR/key_averages.txt and DIR/profile.json.
    """
    from gpulab.artifact.ownership import check_output_folder
    from gpulab.measure.profile_report import ProfileOptions

    flags = {
        "recipe": recipe,
        "device": device,
        "precision": precision,
        "batch_size": batch_size,
        "compile": compile,
        "seed": seed,
        "engine": engine,
    }
    user = layer_settings(config, flags, set_)
    out_dir = out or Path(f"runs/profile-{str(user.get('recipe', 'run')).replace(':', '.')}")
    user.pop("out_dir", None)  # profile writes only to --out
    check_output_folder(out_dir, "profile")  # a folder of the user's: refused before a framework loads
    options = ProfileOptions(
        warmup=warmup, steps=steps, active=active, measure_peak=peak, memory_snapshot=memory_snapshot
    )
    profile = engines.capability(engines.of(user), "profile")
    result = profile.run(user, out_dir, options)
    if result.report.get("world_size", 1) > 1 and "profile" not in result.files:
        return  # not rank zero: rank 0 prints
    VIEWS[profile.view](result.report, make_console())
    for name, path in result.files.items():
        make_console().print(f"wrote {name}: {path}", highlight=False)


def render(report: dict, console: Console) -> None:
    """The breakdown table, then FLOPs/MFU, memory and the diagnosis."""
    # The title on a line of its own: as a table title rich would wrap it to the table's narrow width.
    console.print(
        f"{report.get('recipe', '')} on {report['device']} ({report['precision']}), "
        f"batch {report['batch_size']}: mean of {_kept(report)}",
        highlight=False,
    )
    _breakdown(console, report, _ROWS)
    peaks = report["peaks"]
    sheet = peaks["datasheet_flops_per_s"]
    against_sheet = (
        f"MFU {_pct(report['mfu'])} of the datasheet peak ({_flops(sheet)}/s)"
        if sheet
        else "no datasheet peak for this device"
    )
    measured = peaks["measured_flops_per_s"]
    against_measured = (
        f"{_pct(report['mfu_measured'])} of the measured {peaks['dtype']} peak ({_flops(measured)}/s)"
        if measured
        else "no measured peak"
    )
    console.print(
        f"{against_sheet}; {against_measured}; a one-sample step takes {report['fixed_cost_s'] * 1e3:.2f} ms",
        highlight=False,
    )
    if peaks.get("note"):
        console.print(f"[yellow]note:[/] {peaks['note']}", highlight=False)
    mem = report["memory"]
    util = report["nvml"]["mean"].get("utilization_gpu_pct") if report["nvml"]["available"] else None
    console.print(
        f"memory ({mem['kind']}): peak {mem['peak_bytes'] / 2**20:,.1f} MiB, reserved "
        f"{mem['reserved_bytes'] / 2**20:,.1f} MiB"
        + (f"; GPU utilisation {util:.0f}%" if util is not None else ""),
        highlight=False,
    )
    _busy_note(report, console)
    d = report["diagnosis"]
    console.print(f"[bold]{d['bound']}[/]: {d['reason']}")
    console.print(f"fix: {d['fix']}", highlight=False)


_STEP_ROWS = (("data", "data wait"), ("compute", "forward+backward+optimizer (one graph)"))


def render_steps(report: dict, console: Console) -> None:
    """An engine's profile of step times only (TensorFlow's): data and compute per step, the summary, and
    what the engine does not give."""
    engine = engines.get(report["engine"])
    compiler = engines.capability(engine, "profile").compiler
    console.print(
        f"{report.get('recipe', '')} on {report['device']} ({report['precision']}, engine {engine.name}"
        f"{f', {compiler}' if report['compiled'] else ''}), batch {report['batch_size']}: "
        f"mean of {_kept(report)}",
        highlight=False,
    )
    _breakdown(console, report, _STEP_ROWS)
    mem = report["memory"]
    console.print(
        f"memory ({mem.get('kind', '?')}): peak {mem['peak_bytes'] / 2**20:,.1f} MiB", highlight=False
    )
    _busy_note(report, console)
    missing = ", ".join(report["not_available"])
    console.print(f"n/a on {engine.framework}: {missing} (profile.json says why for each)", highlight=False)
    console.print(f"trace: tensorboard --logdir {report['trace_dir']} (Profile tab)", highlight=False)


def _busy_note(report: dict, console: Console) -> None:
    """Both engines' profiles: the note that other processes inflated the times, where they did."""
    load = report.get("machine_load") or {}
    if load.get("busy"):
        console.print(
            f"[yellow]note:[/] the machine was busy (load {load['load_1min']} on {load['cores']} cores): "
            "other processes competed for the CPU, so these times are inflated",
        )


def _breakdown(console: Console, report: dict, rows) -> None:
    """The phase table (ms per step and share, then the step) and the median/FLOPs line, both engines'."""
    b, frac = report["breakdown_s"], report["breakdown_fraction"]
    table = Table()
    for col in ("phase", "ms / step", "share"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for key, label in rows:
        table.add_row(label, f"{b.get(key, 0.0) * 1e3:.2f}", f"{frac.get(key, 0.0):.1%}")
    table.add_row("[bold]step[/]", f"[bold]{b['step'] * 1e3:.2f}[/]", "100.0%")
    console.print(table)
    # One step figure: the table's (a mean, the one statistic whose phases add up to the step), which
    # samples/s is taken from; the median is named as the same steps' other statistic, not a second step.
    console.print(
        f"step {b['step'] * 1e3:.2f} ms "
        f"(the table's mean; their median {report['step_s_median'] * 1e3:.2f} ms); "
        f"{report['samples_per_s'] or 0:,.0f} samples/s at that step; "
        f"{_flops(report['flops_per_step'])} per step ({report['flops_method']}); "
        f"achieved {_flops(report['achieved_flops_per_s'])}/s",
        highlight=False,
    )


def _kept(report: dict) -> str:
    dropped = len(report.get("outlier_steps") or [])
    total = report["timed_steps"]
    return (
        plural(total, "step")
        if not dropped
        else f"{total - dropped} of {plural(total, 'step')} ({plural(dropped, 'outlier')} left out)"
    )


def _flops(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value:,.0f} FLOP"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


# An engine's profile_view -> how its report is drawn: a per-phase breakdown, or step times only.
VIEWS = {"phases": render, "steps": render_steps}


def register(app: typer.Typer) -> None:
    app.command()(profile)
