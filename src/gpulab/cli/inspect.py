"""`gpulab inspect RECIPE|module:function`: the model layer by layer, traced with fake tensors.

One row per module call (nested calls indented, down to --depth): inputs and outputs with dtypes,
parameters, forward FLOPs, activation memory, and the layers autocast runs in another dtype than the
run's. Then the totals: parameters, FLOPs per sample (the FLOP counter's), the predicted peak memory of a
training step (the memory estimate's) and whether it fits the device. A layer that fails on its input
ends the table, named with the shape it got and what it expects (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from gpulab import engine_registry as engines
from gpulab import precisions
from gpulab.cli.console import make_console
from gpulab.cli.profile import _flops
from gpulab.config.layering import layer_settings


def inspect(
    recipe: str = typer.Argument(
        None, help="mlp|digits|chargpt, or package.module:function (or set in --config)"
    ),
    config: Path = typer.Option(None, "--config", help="YAML file with any settings (flags override it)"),
    batch_size: int = typer.Option(
        None, "--batch-size", min=1, help="Samples per step [default: the recipe's]"
    ),
    depth: int = typer.Option(3, "--depth", min=0, help="Show nested modules down to this call depth"),
    precision: str = typer.Option(None, help=precisions.HELP),
    device: str = typer.Option(None, help="auto|cpu|cuda|cuda:N|mps|xpu: whose memory the step must fit"),
    engine: str = typer.Option(None, "--engine", help=engines.option_help()),
    as_json: bool = typer.Option(False, "--json", help="Print the rows and totals as JSON"),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Any other setting (repeatable)"),
) -> None:
    """Show the model layer by layer: shapes, FLOPs and memory.

    Per module: input and output shapes and dtypes (under autocast), parameters, forward FLOPs and
    activation memory, traced with fake tensors (nothing is computed); then the totals and whether a
    training step fits the device. A layer that fails on its input stops the table there and is named
    with the input it got and what it expected.
    """
    from gpulab.measure.inspection import InspectFailed
    from gpulab.profiling.inspect import inspect_recipe

    flags = {"recipe": recipe, "device": device, "precision": precision, "batch_size": batch_size}
    user = layer_settings(config, flags, set_)
    user.pop("out_dir", None)  # inspect writes nothing
    if engine:
        user["engine"] = engine
    report = inspect_recipe(user)
    if as_json:
        print(json.dumps(report.to_json(depth), indent=2))
    else:
        render(report, depth, make_console())
    failure = report.inspection.failure
    if failure is not None:
        raise InspectFailed(failure.message())


def render(report, depth: int, console: Console) -> None:
    """The layer table, then the totals (or nothing more when a layer failed: the error line follows)."""
    i = report.inspection
    console.print(
        f"{report.recipe}: batch {i.batch_size} on {report.device} ({report.precision}; "
        f"activations {i.run_dtype}), traced with {i.method}",
        highlight=False,
        markup=False,
        emoji=False,  # a recipe named like my_model:wrong must print as written
    )
    table = _layer_table(report, depth)
    if not console.is_terminal:  # Rich would squeeze the table into 80 columns, cutting shapes: widen
        console.width = max(
            console.width, Measurement.get(console, console.options.update(width=400), table).maximum
        )
    console.print(table)
    if i.failure is not None:
        return
    _render_totals(report, console)
    _render_memory(report, console)


def _layer_table(report, depth: int) -> Table:
    """One row per layer down to ``depth`` (a failed layer at any depth)."""
    i = report.inspection
    table = Table()
    for col, justify in (
        ("layer", "left"),
        ("type", "left"),
        ("input", "left"),
        ("output", "left"),
        ("params", "right"),
        ("FLOPs fwd", "right"),
        ("act. mem", "right"),
    ):
        table.add_column(col, justify=justify)
    parents: list[str] = []  # the name of the open call at each depth
    for row in i.rows:
        del parents[row.depth :]
        parents.append(row.name)
        if row.depth > depth and row.status != "failed":
            continue
        name = "  " * row.depth + (_relative(row.name, parents[-2]) if row.depth else "(model)")
        params = f"{row.params_trainable:,}" + (
            f" +{row.params_frozen:,} frozen" if row.params_frozen else ""
        )
        output = ", ".join(map(str, row.outputs))
        style = None
        if row.status == "failed":
            output, style = "FAILED here", "bold red"
        elif row.status == "unfinished":
            output = "(not reached)"
        out_cell = Text(output)
        if row.cast_dtype:
            out_cell = Text(f"{output} {_cast_mark(report)}", style="yellow")
        table.add_row(
            Text(name),
            Text(row.type),
            Text(", ".join(map(str, row.inputs))),
            out_cell,
            params,
            _flops(row.flops_forward or None) if row.status == "ok" else "",
            _mib(row.activation_bytes) if row.status == "ok" else "",
            style=style,
        )
    return table


def _render_totals(report, console: Console) -> None:
    """Parameters, FLOPs per sample, and which layers ran in another dtype."""
    i = report.inspection
    frozen = f", {report.params_frozen:,} frozen" if report.params_frozen else ""
    console.print(
        f"parameters: {report.params_trainable:,} trainable{frozen} ({_mib(report.params_bytes)})",
        highlight=False,
    )
    counter = _inspect(report).flop_counter
    console.print(
        f"FLOPs per sample: {_per_sample(i.flops_total, i)} per training step (forward + backward; forward "
        f"{_per_sample(i.flops_forward, i)}), {counter}",
        highlight=False,
    )
    casts = sorted({r.type for r in i.rows if r.cast_dtype})
    if casts:
        console.print(
            f"[yellow]{_cast_mark(report)}[/] marks the layers "
            f"{_inspect(report).cast_note[1]} in another dtype than the run's "
            f"{i.run_dtype}: {', '.join(casts)}",
            highlight=False,
        )


def _render_memory(report, console: Console) -> None:
    """The predicted peak of a training step and whether it fits."""
    m = report.memory
    if m is None:
        console.print(f"predicted peak memory: n/a ({report.memory_note})", highlight=False)
        return
    verdict = "n/a"
    if report.fits is not None:
        word = "[green]fits[/]" if report.fits else "[red]does not fit[/]"
        verdict = f"{word} under {_mib(report.limit_bytes)} ({report.limit_source})"
    during = max(m.forward_backward_peak_bytes, m.gradients_bytes + m.optimizer_step_bytes)
    data = f"data held by the loader {_mib(m.data_bytes)} + " if m.data_bytes else ""
    console.print(
        f"predicted peak memory of a training step at batch {m.batch_size} "
        f"({report.optimizer or 'no optimizer'}): {_mib(m.predicted_peak_bytes)} = parameters "
        f"{_mib(m.parameters_bytes + m.buffers_bytes)} + optimizer state {_mib(m.optimizer_state_bytes)} + "
        f"{data}batch {_mib(m.batch_bytes)} + peak of forward/backward {_mib(during)}; {verdict}",
        highlight=False,
    )


def _cast_mark(report) -> str:
    return _inspect(report).cast_note[0]


def _inspect(report):
    """The inspect capability of the engine that made ``report``: its words for the report."""
    return engines.capability(engines.get(report.engine), "inspect")


def _per_sample(flops: int | None, i) -> str:
    return _flops(flops / max(i.batch_size, 1) if flops else None)


def _relative(name: str, parent: str) -> str:
    """``blocks.0.mlp.0`` under ``blocks.0.mlp`` is ``0``: the indent already says whose child it is."""
    return name[len(parent) + 1 :] if parent and name.startswith(parent + ".") else name


def _mib(n: int | float | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.1f} MiB" if n >= 2**17 else f"{n / 2**10:,.1f} KiB"


def register(app: typer.Typer) -> None:
    app.command()(inspect)
