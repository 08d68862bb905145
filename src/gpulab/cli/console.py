"""The one way a verb makes its Rich console."""

from __future__ import annotations

import sys

from rich.console import Console


def make_console(**options) -> Console:
    """A console that wraps lines only for a person at a terminal.

    Without one (a pipe, CI, nohup) Rich assumes 80 columns and breaks long lines anywhere, file paths
    included (seen in a log on 2026-11-23: ``.../run/summa`` + ``ry.json``): there, lines stay whole.
    """
    if sys.stdout.isatty():
        return Console(**options)
    return Console(soft_wrap=True, **options)
