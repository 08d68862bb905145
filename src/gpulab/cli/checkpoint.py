"""`gpulab checkpoint inspect PATH` and `gpulab checkpoint export PATH --to FILE.safetensors`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from gpulab.cli.console import make_console
from gpulab.cli.export import recipe_option, trust_option
from gpulab.cli.text import number
from gpulab.core.recipes.trust import UntrustedRecipeError
from gpulab.errors import CheckpointError

checkpoint_app = typer.Typer(
    help="Inspect and export checkpoints.", no_args_is_help=True, rich_markup_mode=None
)


_WHERE_FIX = "give a run folder (gpulab train --out), its checkpoints folder or a step-* folder in it"
WHERE = "A run directory (its checkpoints), a checkpoints root (uses 'latest'), or one checkpoint directory"


def _checkpoints(path: Path) -> tuple[Path, Path | None]:
    """(checkpoints, run directory or None). A run directory means its checkpoints, as for `gpulab export
    RUN`: inspecting runs/x itself said INVALID ("no complete checkpoint") about a run whose checkpoints
    are fine."""
    from gpulab.artifact.run_record import checkpoint_root

    return checkpoint_root(path) if path.is_dir() else (path, None)


@checkpoint_app.command()
def inspect(
    path: Path = typer.Argument(..., help=WHERE),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    recipe: str = recipe_option(),
    trust_recipe: bool = trust_option(),
) -> None:
    """Step, epoch, metrics and every file with its checksum status. Exit 1 when it does not verify.

    A checkpoint that names a module:function recipe names code that export would import: it is said,
    and exit 2, unless you repeat the recipe with --recipe or pass --trust-recipe.
    """
    from gpulab import engine_registry as engines
    from gpulab.checkpoint.inspect import inspect_checkpoint
    from gpulab.checkpoint.read import check_names_checkpoint
    from gpulab.core.recipes.trust import RecipeTrust, names_code, refusal

    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{path}: no such run, checkpoints folder or checkpoint; {_WHERE_FIX}")
    root, run_dir = _checkpoints(path)
    check_names_checkpoint(root, _WHERE_FIX)  # a file, an empty folder: one line, not an empty report
    # the storage is read here; the files of the engine that wrote it (its MANIFEST's layout), by that engine
    report = inspect_checkpoint(
        root, lambda layout: engines.capability(engines.for_layout(layout), "checkpoint inspect").read
    )
    named = _named(report, run_dir)
    refused = refusal(*named, RecipeTrust(recipe, trust_recipe)) if named and report["valid"] else None
    if named:
        report["recipe"], report["recipe_file"] = named
    report["names_code"] = bool(named and names_code(named[0]))
    report["recipe_refused"] = refused
    unreadable = [f for f in report.get("files", []) if f["status"] == "unreadable"]
    if (
        unreadable
    ):  # not a damaged checkpoint: one this user may not read (exit 2, as any place gpulab cannot use)
        name = Path(report["path"]) / unreadable[0]["name"]
        raise CheckpointError(
            f"{name}: unreadable: give this user read permission on it, or run as its owner"
        )
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _render(report)
    if not report["valid"]:
        raise typer.Exit(1)
    if refused:
        raise UntrustedRecipeError(refused)


def _named(report: dict, run_dir: Path | None) -> tuple[str, str] | None:
    """(recipe, the file naming it): the checkpoint's own record, else the run's summary.json."""
    from gpulab.artifact.run_record import recorded_recipe

    trajectory = {"recipe": report["recipe"]} if report.get("recipe") else None
    found = recorded_recipe(trajectory, Path(report.get("recipe_file") or report["path"]), run_dir)
    return (found[0], found[2]) if found else None


def _render(report: dict) -> None:
    from gpulab.core.recipes.trust import describe

    console = make_console()
    status = "[green]valid[/]" if report["valid"] else "[bold red]INVALID[/]"
    if report["valid"] and report["names_code"]:
        status += ", [bold yellow]names code[/]"
    console.print(f"{report['path']}: {status}, step {report.get('step')}, epoch {report.get('epoch')}")
    for key, value in (report.get("metrics") or {}).items():
        console.print(f"  {key} = {number(value)}")
    table = Table("file", "size", "sha256", "status")
    for f in report.get("files", []):
        table.add_row(f["name"], str(f.get("size")), (f.get("sha256") or "")[:16], f["status"])
    console.print(table)
    if report["names_code"]:
        console.print(f"names code: {report['recipe_file']} names {describe(report['recipe'])}", markup=False)
    for note in report.get("notes", []):
        console.print(f"note: {note}", markup=False)
    for problem in report.get("problems", []):
        console.print(f"[red]problem:[/] {problem}")


@checkpoint_app.command()
def export(
    path: Path = typer.Argument(..., help=WHERE),
    to: Path = typer.Option(..., "--to", help="Destination .safetensors file"),
) -> None:
    """Write the model weights to one .safetensors file.

    The checkpoint is verified against its manifest first: for a run, the step its `latest` names, which
    is refused (exit 2) if it does not verify, never swapped for an older step. The file carries gpulab's
    mark and the step in its metadata header; a later export replaces only such a file.
    """
    from gpulab import engine_registry as engines
    from gpulab.artifact.ownership import check_place, check_replaceable
    from gpulab.checkpoint.io import META, manifest_layout
    from gpulab.checkpoint.read import load_meta, verified
    from gpulab.checkpoint.weights_file import is_marked

    check_replaceable(to, "a checkpoint export", is_marked, "--to")  # before anything is read
    check_place(to, "--to")
    directory = verified(_checkpoints(path)[0])
    # the weights by the engine that wrote them (its MANIFEST's layout); no recipe is read or imported
    engine = engines.for_layout(manifest_layout(directory))
    written = engines.capability(engine, "checkpoint export").run(directory, to)
    step = load_meta(directory / META).get("step")
    make_console().print(f"wrote {written} (step {step}, from {directory})", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoint_app, name="checkpoint")
