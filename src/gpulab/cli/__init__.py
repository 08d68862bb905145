"""The ``gpulab`` command: one thin file per verb, registered on one typer app.

``main`` is the console-script entry point. It turns a ``GpulabError`` (a user's mistake or an
environment problem) into one line on stderr and exit code 2; ``--debug`` keeps the traceback. gpulab's own
warnings (advice such as "this precision is emulated here") print as one ``gpulab: warning:`` line.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import typer

from gpulab.errors import GpulabError

app = typer.Typer(
    name="gpulab",
    help="Train PyTorch models from a laptop CPU to one GPU to many: diagnosed, accelerated, measured.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors.")) -> None:
    _state["debug"] = debug


def _register() -> None:
    # Imported here so each verb stays in its own file and `gpulab --help` does not import torch.
    from gpulab.cli import bench, checkpoint, doctor, launch, profile, train

    for verb in (doctor, train, checkpoint, launch, bench, profile):
        verb.register(app)


_PACKAGE = Path(__file__).resolve().parents[1]
_show_warning = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """gpulab's own warnings are advice for a person: one line, without the source line under it."""
    if Path(filename).resolve().is_relative_to(_PACKAGE):
        print(f"gpulab: warning: {message}", file=file or sys.stderr)
    else:  # another library's warning keeps its location
        _show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (click handles usage errors itself: exit 2)."""
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    if not debug:
        warnings.showwarning = _one_line_warning
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except GpulabError as exc:
        if debug:
            raise
        print(f"gpulab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        warnings.showwarning = _show_warning  # main() also runs inside tests' processes
    return 0
