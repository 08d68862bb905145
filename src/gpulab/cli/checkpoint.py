"""`gpulab checkpoint inspect PATH` and `gpulab checkpoint export PATH --to FILE.safetensors`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from gpulab.cli.console import make_console
from gpulab.cli.text import number

checkpoint_app = typer.Typer(
    help="Inspect and export checkpoints.", no_args_is_help=True, rich_markup_mode=None
)


WHERE = "A run directory (its checkpoints), a checkpoints root (uses 'latest'), or one checkpoint directory"


def _checkpoints(path: Path) -> Path:
    """A run directory means its checkpoints, as for `gpulab export RUN`: inspecting runs/x itself said
    INVALID ("no complete checkpoint") about a run whose checkpoints are fine."""
    from gpulab.export.rebuild import checkpoint_root

    return checkpoint_root(path)[0] if path.is_dir() else path


@checkpoint_app.command()
def inspect(
    path: Path = typer.Argument(..., help=WHERE),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Step, epoch, metrics and every file with its checksum status. Exit 1 when it does not verify."""
    from gpulab.checkpoint.api import inspect_checkpoint

    report = inspect_checkpoint(_checkpoints(path))
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        console = make_console()
        status = "[green]valid[/]" if report["valid"] else "[bold red]INVALID[/]"
        console.print(f"{report['path']}: {status}, step {report.get('step')}, epoch {report.get('epoch')}")
        for key, value in (report.get("metrics") or {}).items():
            console.print(f"  {key} = {number(value)}")
        table = Table("file", "size", "sha256", "status")
        for f in report.get("files", []):
            table.add_row(f["name"], str(f.get("size")), (f.get("sha256") or "")[:16], f["status"])
        console.print(table)
        for problem in report.get("problems", []):
            console.print(f"[red]problem:[/] {problem}")
    if not report["valid"]:
        raise typer.Exit(1)


@checkpoint_app.command()
def export(
    path: Path = typer.Argument(..., help=WHERE),
    to: Path = typer.Option(..., "--to", help="Destination .safetensors file"),
) -> None:
    """Write the model weights to one .safetensors file.

    The checkpoint is verified against its manifest first.
    """
    from gpulab.checkpoint.api import export_weights

    written = export_weights(_checkpoints(path), to)
    make_console().print(f"wrote {written}")


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoint_app, name="checkpoint")
