"""Which TensorFlow worker a failed job is really about, for `gpulab launch --engine tensorflow`'s last line.

A worker that stops answering (suspended by SIGSTOP or Ctrl-Z, hung in the kernel) does not die: its peers
do, when TensorFlow's coordination service notices the missing heartbeats ("The following tasks are
unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1"). The launcher sees only the peer's
exit code, and would blame it. Two witnesses name the real one: the process state of this node's
workers (``T``: stopped), and the coordination service's message in a dead worker's log (``--log-dir``).
"""

from __future__ import annotations

import re
from pathlib import Path

_UNHEALTHY = re.compile(r"stopped sending heartbeats\):\s*/job:(?:worker|chief)/replica:\d+/task:(\d+)")
_TAIL_BYTES = 256 * 1024


def is_suspended(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP/SIGTSTP: state ``T``), from /proc; False where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["T"]  # the command name may hold spaces and ")"


def lost_tasks(log: Path) -> list[int]:
    """The tasks TensorFlow's coordination service reported as lost in this worker's log (its tail)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - _TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return sorted({int(task) for task in _UNHEALTHY.findall(text)})
