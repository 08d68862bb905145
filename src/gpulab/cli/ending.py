"""How the console command ends. A command whose time is its user's budget (``gpulab tune --budget``) asks to
end without the interpreter's teardown once its files are written and its report printed: tearing down
TensorFlow's thousands of modules and graphs took 3-11 s after tune's last line on a loaded 2-core machine
(a ``--budget 40`` ran 54 s of wall time), time the command's own record could not count. Python's exit
steps that matter -- the logging handlers and the standard streams -- are done first."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

_asked: list[bool] = []


def reset() -> None:
    """A command begins (each ``main`` call): no request yet."""
    _asked.clear()


def without_teardown() -> None:
    """This command's work is done and recorded: the process ends as soon as ``main`` returns."""
    _asked[:] = [True]


def exit_process(code: int) -> NoReturn:
    """Exit with ``code``: without the interpreter's teardown where the command asked for it."""
    if not _asked:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
