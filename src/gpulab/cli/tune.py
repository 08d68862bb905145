"""`gpulab tune RECIPE|--config run.yaml [--budget SECONDS] [--out DIR] [--engine]`: a measured search
over the speed knobs (precision, compile, batch size, loader workers, fused optimizer, ...; on TensorFlow
precision, batch size, the tf.data cache and prefetch, XLA) on this machine."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import typer

from gpulab import engine_registry as engines
from gpulab.cli import ending
from gpulab.cli.console import make_console
from gpulab.cli.started import command_started
from gpulab.config.layering import layer_settings


def tune(
    recipe: str = typer.Argument(
        None, help="mlp|digits|chargpt, or package.module:function (or set in --config)"
    ),
    config: Path = typer.Option(
        None, "--config", help="YAML file of the run to tune (as gpulab train takes)"
    ),
    budget: float = typer.Option(
        120.0, "--budget", help="Seconds for the whole search; the best so far stands"
    ),
    out: Path = typer.Option(
        None, "--out", help="Where tuned.yaml, tune.json and tune.png go [default: runs/tune-RECIPE]"
    ),
    device: str = typer.Option(None, help="auto|cpu|cuda|cuda:N|mps|xpu"),
    engine: str = typer.Option(None, "--engine", help=engines.option_help()),
    tolerance: float = typer.Option(
        0.10, "--tolerance", help="A trial's loss may exceed the default's by this fraction, no more"
    ),
    steps: int = typer.Option(
        30,
        "--steps",
        min=2,
        help="Trial length, in steps of the default batch (every trial sees as many samples)",
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Any other setting (repeatable)"),
) -> None:
    """Find the fastest settings for a run on this machine.

    Short real trials: each trains the recipe for the same number of samples through the Trainer; the
    first step (compile) is excluded, the rest timed as repeats (median and spread). A trial whose loss is not
    finite or worse than the default's by more than --tolerance is rejected. Writes OUT/tuned.yaml
    (use it with gpulab train --config), OUT/tune.json (every trial, and why values were skipped) and
    OUT/tune.png (samples/s per trial, with its spread, against the default's).
    """
    from gpulab.artifact.ownership import check_output_folder
    from gpulab.tune.report import print_report, write_outputs
    from gpulab.tune.search import Search

    started = command_started()  # the budget counts the framework's import and the settings too
    _import_the_plotting()
    user = layer_settings(config, {"recipe": recipe, "device": device, "engine": engine}, set_)
    out_dir = out or Path(f"runs/tune-{str(user['recipe']).replace(':', '.')}")
    check_output_folder(out_dir, "tune")  # a folder of the user's: refused before a trial runs
    # Piped to a file or a CI log: wide enough for the table (rich would assume 80 columns).
    console = make_console() if sys.stdout.isatty() else make_console(width=150)
    result = Search(
        user,
        budget_s=budget,
        tolerance=tolerance,
        steps=steps,
        log=lambda line: console.print(line, markup=False, highlight=False, style="dim"),
        started=started,
    ).run()
    tuned, json_path, png = write_outputs(out_dir, user, result)
    result.elapsed_s = time.monotonic() - started  # the whole command, its files written
    print_report(console, result, tuned, json_path, png)
    ending.without_teardown()  # the record above is the command's whole time: nothing runs after it


def _import_the_plotting() -> None:
    """matplotlib imported now (2-3 s on a busy 2-core machine), inside the budget the search then plans
    with: imported for tune.png after the search, it ran the command 2 s past a 40 s budget."""
    with contextlib.suppress(ImportError):  # no matplotlib: no tune.png (report.py says so)
        import matplotlib.figure  # noqa: F401


def register(app: typer.Typer) -> None:
    app.command()(tune)
