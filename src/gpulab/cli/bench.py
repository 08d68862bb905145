"""`gpulab bench [SUITE...] [--quick] [--device D] [--out DIR]` and `gpulab bench compare A.json B.json`."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpulab import engine_registry as engines

_VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "within noise": "", "info": "dim"}


def bench(
    suites: list[str] = typer.Argument(
        None,
        help="Suites to run, in order (default: all): matmul, precision, memory, accumulate, compile, "
        "parallel, transfer, inference, transformer. Or `compare A.json B.json` to compare two runs.",
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Fewer sizes and steps: about a minute on a quiet 2-core CPU (inference's code generation "
        "included), minutes on a busy one.",
    ),
    device: str = typer.Option("auto", help="auto|cpu|cuda|cuda:N"),
    out: Path = typer.Option(
        Path("runs/bench"), "--out", help="Directory for results.json, PNGs, report.html"
    ),
    repeats: int = typer.Option(
        None, "--repeats", min=1, help="Timed repeats per figure (default: per profile)"
    ),
    memory_limit: int = typer.Option(
        None,
        "--memory-limit",
        min=1,
        help="memory suite: MiB a batch may use (default: GPU memory, 1/4 of free RAM)",
    ),
    tolerance: float = typer.Option(
        0.05, "--tolerance", min=0.0, help="compare: relative change never flagged, even outside the spread"
    ),
    threads: int = typer.Option(None, "--threads", min=1, help="CPU threads for torch (default: torch's)"),
    engine: str = typer.Option(
        engines.DEFAULT,
        "--engine",
        help=engines.option_help() + "; several comma-separated (torch,tensorflow): the first two side "
        "by side in the report (a suite an engine has no side of is skipped, with why)",
    ),
    variants: str = typer.Option(
        None,
        "--variants",
        help="transformer suite: only these rows, comma-separated (hand-written, eager, compile, "
        "compile+opt, compile+chunked-ce, compile+max-autotune, cuda-graph, float8); one named here runs in "
        "--quick too",
    ),
    smoke: bool = typer.Option(False, "--smoke", hidden=True, help="Tiny sizes, for tests."),
) -> None:
    """Benchmark this machine, one suite after another.

    Suites: matmul, precision, memory, accumulate (gradient accumulation), compile, parallel (data
    parallel), transfer, inference (one model in each runtime), transformer (GPT-2-small step: tokens/s and
    MFU per variant).

    Writes OUT/results.json (every figure with its repeats and spread, and the environment), a PNG per
    suite and OUT/report.html (self-contained). `gpulab bench compare A.json B.json` exits 1 when B has
    a regression beyond the measured spread.
    """
    # Piped to a file or a CI log: 100 columns (rich's default would be 80); tables wrap their cells to fit.
    console = Console() if sys.stdout.isatty() else Console(width=120)
    if suites and suites[0] == "compare":
        raise typer.Exit(_compare(suites[1:], tolerance, console))
    from gpulab.artifact.ownership import check_output_folder
    from gpulab.bench import BenchConfig, run_bench

    check_output_folder(out, "bench")  # a folder of the user's: refused before a suite starts

    config = BenchConfig(
        suites=list(suites or []),
        profile="smoke" if smoke else "quick" if quick else "full",
        device=device,
        out_dir=out,
        repeats=repeats,
        memory_limit_mib=memory_limit,
        threads=threads,
        engines=[e.strip() for e in engine.split(",") if e.strip()],
        variants=[v.strip() for v in (variants or "").split(",") if v.strip()],
    )
    doc = run_bench(config, log=lambda line: console.print(line, highlight=False, markup=False))
    for name, suite in doc["suites"].items():
        render_suite(name, suite, console)
    console.print(f"wrote {out / 'results.json'} and {out / 'report.html'}")
    if any(s["status"] != "ok" for s in doc["suites"].values()):
        raise typer.Exit(1)


def render_suite(name: str, suite: dict, console: Console) -> None:
    """Title, table and notes, within the console's width: notes wrap at words under their label."""
    # The title on its own line: as a table title rich would wrap it to the table's width.
    console.print(f"{suite['title']} ({name}, {suite['status']}, {suite['seconds']:.1f} s)", highlight=False)
    # Rows of different kinds (the transfer suite's copies and train steps) get a table each: one table
    # of all their columns would be too wide to read.
    kinds: dict[tuple, list[dict]] = {}
    for row in suite["rows"]:
        kinds.setdefault(tuple(row["key"]), []).append(row)
    for rows in kinds.values():
        console.print(_table(rows))
    for note in suite["notes"]:
        text = textwrap.fill(note, console.width, initial_indent="  note: ", subsequent_indent=" " * 8)
        console.print(text, highlight=False, markup=False)


def _table(rows: list[dict]) -> Table:
    from gpulab.bench.report import figure_header, format_number, label

    keys = list(dict.fromkeys(k for r in rows for k in r["key"]))
    figures = list(dict.fromkeys(f for r in rows for f in r["figures"]))
    table = Table()
    units = {f: next(r["figures"][f]["unit"] for r in rows if f in r["figures"]) for f in figures}
    for column in keys:
        table.add_column(label(column), overflow="fold")  # too narrow: fold, never cut
    for f in figures:
        table.add_column(figure_header(f, units[f]), justify="right", overflow="fold")
    for r in rows:
        cells = [str(r["key"].get(k, "")) for k in keys]
        cells += [format_number(r["figures"][f]["value"]) if f in r["figures"] else "-" for f in figures]
        table.add_row(*cells)
    return table


def _compare(paths: list[str], tolerance: float, console: Console) -> int:
    from gpulab.bench.compare import compare_results, environment_differences, unmatched
    from gpulab.bench.report import format_number
    from gpulab.errors import ConfigError
    from gpulab.measure.results import load_results

    if len(paths) != 2:
        raise ConfigError("compare needs two results files: gpulab bench compare A.json B.json")
    a, b = (load_results(p) for p in paths)
    for diff in environment_differences(a, b):
        console.print(f"[yellow]environment differs[/] {diff}", highlight=False)
    comparisons = compare_results(a, b, tolerance)
    table = Table(
        "suite", "row", "figure", "A", "B", "B/A", "verdict", title=f"{paths[1]} against {paths[0]}"
    )
    for c in comparisons:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}"
        style = _VERDICT_STYLE[c.verdict]
        a_text = f"{format_number(c.a.value)} {c.a.unit} ±{format_number((c.a.high - c.a.low) / 2)}"
        b_text = f"{format_number(c.b.value)} {c.b.unit} ±{format_number((c.b.high - c.b.low) / 2)}"
        table.add_row(
            c.suite,
            c.key,
            c.figure,
            a_text,
            b_text,
            ratio,
            f"[{style}]{c.verdict}[/]" if style else c.verdict,
        )
    console.print(table)
    for missing in unmatched(a, b):
        console.print(f"[dim]not in B:[/] {missing}", highlight=False)
    counts = {
        v: sum(c.verdict == v for c in comparisons) for v in ("regression", "improvement", "within noise")
    }
    console.print(", ".join(f"{n} {v}" for v, n in counts.items()))
    return 1 if counts["regression"] else 0


def register(app: typer.Typer) -> None:
    app.command()(bench)
