"""W&B's helper process (``wandb-core``) started outside the run's process tree, so the run's signals miss it.

Left to itself, ``wandb.init`` starts ``wandb-core`` as a child of the run. A stop meant for the run then
reaches it too (``kill -TERM $P $(pgrep -P $P)``; SLURM's scancel, which signals every descendant of a
step's task under proctrack/linuxproc): it dies before gpulab has written its checkpoint and closed the
trackers, the last records are lost and ``wandb.finish`` raises ``ConnectionResetError``. A session of its
own is not enough (wandb already gives it one): what is signalled is the process tree.

So gpulab starts it first: a short-lived launcher starts ``wandb-core`` in a session of its own and exits,
leaving it a child of init; ``WANDB_SERVICE`` tells ``wandb.init`` to connect to it instead of starting one.
``--detached`` because its parent is no longer the run: it ends ``IDLE_TIMEOUT`` after the run's connection
closes (a normal end, or the run killed with SIGKILL), having written what it received.

This uses wandb's own service token classes (``wandb.sdk.lib.service``; written against wandb 0.31): where
they or the binary are missing, wandb starts its helper itself as before, with one warning.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabWarning

IDLE_TIMEOUT = "60s"
START_TIMEOUT_S = 30.0  # wandb's own wait for the port file (x_service_wait)
# Starts argv[1:] in a new session with no pipe of ours open, prints its pid and exits (so init adopts it).
_LAUNCHER = (
    "import subprocess as s, sys; d = s.DEVNULL; "
    "print(s.Popen(sys.argv[1:], start_new_session=True, stdin=d, stdout=d, stderr=d).pid)"
)


def start_outside_the_run(wandb: Any) -> int | None:
    """Start ``wandb-core`` outside this process's tree and point ``wandb.init`` at it; its pid, or None
    when wandb is already connected to a service (or this wandb cannot be started so: one warning)."""
    if os.environ.get("WANDB_SERVICE") or _connected(wandb):
        return None
    try:
        from wandb.sdk.lib.service import service_token

        core = wandb.util.get_core_path()
    except Exception as exc:  # an older or newer wandb than this was written for
        _warn(f"this wandb has no helper gpulab can start ({type(exc).__name__}: {exc})")
        return None
    with tempfile.TemporaryDirectory(prefix="gpulab-wandb-") as tmp:
        port_file = Path(tmp, "port.txt")
        args = [core, "--port-filename", str(port_file), "--pid", str(os.getpid())]
        args += ["--detached", "--idle-timeout", IDLE_TIMEOUT]
        launched = subprocess.run([sys.executable, "-c", _LAUNCHER, *args], capture_output=True, text=True)
        lines = _wait_for(port_file) if launched.returncode == 0 else None
    if not lines:
        _warn(f"wandb-core did not start ({(launched.stderr.strip().splitlines() or ['no port file'])[-1]})")
        return None
    token = _token(service_token, lines)
    if token is None:
        _warn(f"wandb-core offered no connection gpulab knows ({lines})")
        return None
    token.save_to_env()
    return int(launched.stdout.strip())


def _connected(wandb: Any) -> bool:
    """Whether this process already talks to a wandb-core (a user's own wandb.init came first)."""
    try:
        from wandb.sdk import wandb_setup

        return getattr(wandb_setup.singleton(), "_connection", None) is not None
    except Exception:
        return False


def _wait_for(port_file: Path) -> list[str] | None:
    """The port file's lines once wandb-core has written all of it (its last line is ``EOF``)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            lines = port_file.read_text().splitlines()
        except OSError:
            lines = []
        if lines and lines[-1] == "EOF":
            return lines
        time.sleep(0.05)
    return None


def _token(service_token: Any, lines: list[str]) -> Any:
    for line in lines:
        key, _, value = line.partition("=")
        if key == "unix":
            return service_token.UnixServiceToken(parent_pid=os.getpid(), path=value)
        if key == "sock":
            return service_token.TCPServiceToken(parent_pid=os.getpid(), port=int(value))
    return None


def _warn(why: str) -> None:
    warnings.warn(
        f"wandb: {why}; wandb starts it as a child of the run, where a signal meant for the run reaches it",
        GpulabWarning,
        stacklevel=3,
    )
