"""The ``gpulab`` command: one thin file per verb, registered on one typer app.

``main`` is the console-script entry point. It turns a ``GpulabError`` (a user's mistake or an
environment problem) into one line on stderr and exit code 2; ``--debug`` keeps the traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings

import typer
from typer._click import exceptions as click_errors

from gpulab.cli import ending, started
from gpulab.distributed import rank_errors
from gpulab.errors import GpulabError, GpulabWarning, choices
from gpulab.redaction import CREDENTIALS_ENV, restore_credentials

app = typer.Typer(
    name="gpulab",
    help="Train PyTorch models from a laptop CPU to one GPU to many: diagnosed, accelerated, measured.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich panels print `<bool>` beside every flag and keep a docstring's line
    # breaks in its later paragraphs; this mode reflows paragraphs to the terminal as click does.
    rich_markup_mode=None,
)

_state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors.")) -> None:
    _state["debug"] = debug


def _register() -> None:
    # Imported here so each verb stays in its own file and `gpulab --help` does not import torch.
    from gpulab.cli import bench, checkpoint, doctor, export, inspect, launch, profile, train, tune

    if _state.get("registered"):  # once a process: each main() in one process (the tests') added them
        return  # all again, and typer rebuilt every copy on every call (seconds a call after a hundred)
    _state["registered"] = True
    for verb in (doctor, train, checkpoint, launch, bench, profile, inspect, export, tune):
        verb.register(app)


def _one_line_warnings() -> None:
    """gpulab's own warnings print as ``gpulab: warning: ...``, one line, without a source line."""
    plain = warnings.formatwarning
    if getattr(plain, "gpulab", False):  # installed by an earlier main() in this process
        return

    def format_warning(message, category, filename, lineno, line=None):
        if issubclass(category, GpulabWarning):
            return f"gpulab: warning: {message}\n"
        return plain(message, category, filename, lineno, line)

    format_warning.gpulab = True
    warnings.formatwarning = format_warning


def entry() -> None:
    """The console script: ``main`` and exit; a rank of a multi-process job leaves without the interpreter's
    teardown (``process_group.exit_without_teardown`` says why), and so does a command that asked
    (``ending.py``: tune, whose budget is the process's life)."""
    code = main()
    # not imported: no group (and no torch)
    groups = sys.modules.get("gpulab.engines.torch.distributed.process_group")
    if groups is not None and groups.created_a_group():
        groups.exit_without_teardown(code)
    ending.exit_process(code)


def _missing_framework(module: str | None) -> str | None:
    """A framework that is an engine's extra (pyproject.toml) is missing: one line naming the extra and
    the other engines; None for any other missing module (a bug: its traceback)."""
    from gpulab import engine_registry as engines

    engine = engines.for_framework(module)
    if engine is None:
        return None
    others = choices([name for name in engines.names() if name != engine.name])
    return (
        f"{engine.framework} is not installed and this command needs it (the {engine.name} engine); "
        f"fix: pip install 'gpulab[{engine.extra}]'" + (f", or use --engine {others}" if others else "")
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (a usage error: one line, exit 2)."""
    started.mark(process=argv is None)  # the console command: from its process's start
    ending.reset()
    _register()
    _one_line_warnings()
    if argv is None and CREDENTIALS_ENV in os.environ:  # a rank of `gpulab launch`: its argv is masked
        argv = restore_credentials(sys.argv[1:])
        del os.environ[CREDENTIALS_ENV]
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        # Not standalone: a usage error comes back here, to be said in one line (click prints four).
        code = app(args=argv, prog_name="gpulab", standalone_mode=False)  # `python -m gpulab` says gpulab
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except click_errors.NoArgsIsHelpError as exc:  # `gpulab` or `gpulab checkpoint` alone: the help
        exc.show()
        return exc.exit_code
    except click_errors.ClickException as exc:
        print(f"gpulab: error: {usage_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:  # Ctrl-D at a prompt
        print("gpulab: aborted", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        line = None if debug else _missing_framework(exc.name)
        if line is None:
            raise
        print(f"gpulab: error: {line}", file=sys.stderr)
        return 2
    except GpulabError as exc:
        if debug:
            raise
        if getattr(exc, "show_cause", False) and exc.__cause__ is not None:  # the user's own bug
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        elif (
            getattr(exc, "label", "error") == "error" and exc.exit_code == 2 and rank_errors.record(str(exc))
        ):  # a rank: `gpulab launch` says it once
            return exc.exit_code
        for line in str(exc).splitlines():  # several mistakes (a config file's): one line each
            print(f"gpulab: {getattr(exc, 'label', 'error')}: {line}", file=sys.stderr)
        return exc.exit_code
    return code if isinstance(code, int) else 0


def usage_line(exc: click_errors.ClickException) -> str:
    """A usage error (a wrong type, an unknown option or verb, a missing argument) as one line: what is
    wrong, and where the valid choices are."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "gpulab"
    verb = where.removeprefix("gpulab").strip()
    return f"{verb + ': ' if verb else ''}{message} (see {where} --help)"
