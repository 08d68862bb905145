"""`gpulab train RECIPE --out DIR [flags]`: train a built-in recipe or your own module:function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpulab import engine_registry as engines
from gpulab import precisions
from gpulab.cli.console import make_console
from gpulab.cli.text import plural
from gpulab.config.layering import layer_settings
from gpulab.config.schema import RunConfig
from gpulab.core.early_checks import check_before_framework
from gpulab.core.run_dir import check_output_dirs


def train(
    recipe: str = typer.Argument(
        None, help="mlp|digits|chargpt, or package.module:function (or set in --config)"
    ),
    out: Path = typer.Option(None, "--out", help="Output directory [default: runs/RECIPE]"),
    config: Path = typer.Option(None, "--config", help="YAML file with any settings (flags override it)"),
    engine: str = typer.Option(None, help=engines.option_help()),
    device: str = typer.Option(None, help="auto|cpu|cuda|cuda:N|mps|xpu"),
    precision: str = typer.Option(None, help=precisions.HELP),
    epochs: int = typer.Option(None, help="Passes over the training data"),
    max_steps: int = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps"),
    batch_size: str = typer.Option(
        None, "--batch-size", help="Samples per forward pass, or auto (the largest that fits)"
    ),
    accumulate: int = typer.Option(None, help="Micro-batches per optimizer step"),
    compile: bool = typer.Option(None, "--compile/--no-compile", help="torch.compile the model"),
    seed: int = typer.Option(None, help="Random seed"),
    resume: str = typer.Option(
        None, help="Checkpoint directory, 'latest', or 'auto' (latest if any; the default under launch)"
    ),
    overwrite: bool = typer.Option(
        None, "--overwrite", help="Remove a previous run's outputs in --out first (else it is refused)"
    ),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Any other setting (repeatable)"),
) -> None:
    """Train a built-in recipe or your own module:function.

    Writes OUT/summary.json, OUT/metrics.jsonl, OUT/tensorboard/ and checkpoints under OUT/checkpoints/.
    """
    settings = run_settings(locals())  # run() adds resume: auto under gpulab launch
    cfg, result, out_dir = engine_of(settings).run(settings)
    if out_dir is None:  # not rank 0: only rank 0 reports
        return
    console = make_console()
    if "nothing_to_do" in result.extras:
        console.print(result.extras["nothing_to_do"], markup=False)
        return
    acc = f", val accuracy {result.accuracy:.2%}" if result.accuracy is not None else ""
    speed = f"{result.samples_per_s:,.0f} samples/s" if result.samples_per_s else "n/a"
    console.print(
        f"[bold]{cfg.recipe}[/]: {plural(result.steps, 'step')}, {plural(result.epochs, 'epoch')} "
        f"on {result.device} "
        f"({result.precision}) in {result.train_seconds:.1f} s; final loss {result.final_loss:.4f}{acc}; "
        f"{speed}; peak memory {result.peak_memory_bytes / 2**20:.0f} MiB"
    )
    load = result.extras.get("machine_load") or {}
    if load.get("note"):
        console.print(f"[yellow]note:[/] {load['note']}", highlight=False)
    diagnosis = result.extras.get("diagnosis")
    if diagnosis:
        console.print(f"{diagnosis['bound']}: {diagnosis['reason']}; fix: {diagnosis['fix']}", markup=False)
    console.print(f"wrote {out_dir / 'summary.json'} and {out_dir / 'metrics.jsonl'}")


def run_settings(given: dict[str, Any]) -> RunConfig | dict[str, Any]:
    """The run's settings from ``train``'s parameters (by name): the config file, then the flags, then
    ``--set``, and ``out_dir`` defaulting to runs/RECIPE; validated here, once, before any framework is
    imported (the dict as given where it names no recipe: the engine's line names its recipes)."""
    batch_size = given["batch_size"]
    flags = {
        "recipe": given["recipe"],
        "out_dir": str(given["out"]) if given["out"] else None,
        **{key: given[key] for key in ("engine", "device", "precision", "epochs", "max_steps")},
        "batch_size": int(batch_size) if batch_size and batch_size.isdigit() else batch_size,
        **{key: given[key] for key in ("accumulate", "compile", "seed", "resume", "overwrite")},
    }
    user = layer_settings(given["config"], flags, given["set_"])
    if "out_dir" not in user and isinstance(user.get("recipe"), str):
        user["out_dir"] = f"runs/{user['recipe'].replace(':', '.')}"
    # torch or TensorFlow not imported yet: a mistake is told in well under 1 s
    return check_before_framework(user) or user


def engine_of(settings: RunConfig | dict[str, Any]) -> engines.Engine:
    """The engine a run's settings name (torch when unset)."""
    return engines.get(settings.engine if isinstance(settings, RunConfig) else settings.get("engine"))


def check_run(settings: RunConfig | dict[str, Any]) -> None:
    """What a run of these settings would refuse at its start -- the recipe, each setting, the output
    paths -- checked without training (``gpulab launch``, before any rank starts)."""
    checked, _ = engine_of(settings).resolve(settings)
    check_output_dirs(Path(checked.out_dir or f"runs/{checked.recipe}"), checked.checkpoint_dir)


def register(app: typer.Typer) -> None:
    app.command()(train)
