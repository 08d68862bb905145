"""``gpulab tune``'s budget counts from its process's start (issue 40): the interpreter's start and gpulab's
own import came before ``main`` (5 s of a 40 s budget on a busy 2-core machine, which ran 45 s)."""

from __future__ import annotations

import subprocess
import sys

# how long before this line's clock read the command's start lies: the process's start, or main's call
PROBE = """
import time
before = time.monotonic()
from gpulab.cli import started
started.mark(process={process})
print(before - started.command_started())
"""


def _lead(process: bool) -> float:
    code = PROBE.format(process=process)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return float(done.stdout)


def test_the_console_command_counts_from_its_process_start():
    assert _lead(process=True) > 0  # the interpreter had started before the first line ran


def test_a_command_run_inside_a_process_counts_from_its_main():
    assert _lead(process=False) <= 0  # a test's in-process main: not the test process's age
