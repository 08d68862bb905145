"""Where torch's distributed debug dumps go: under the run's own directory, never a shared ``/tmp``.

NCCL's flight recorder (the last collectives each rank issued, dumped on a watchdog timeout) writes one
file per rank, named PREFIX + rank. Unset, torch >= 2.7 writes to ``~/.cache/torch`` and older ones to
``/tmp``: shared with every other job and user of the machine, and far from the run it explains.
``gpulab launch --log-dir DIR`` sends them to ``DIR/flight_recorder/``, a Trainer with an ``out_dir`` to
``OUT/flight_recorder/``; a value the user set always wins. No torch import here (the launcher loads
this before torch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

# torch >= 2.7 reads the first name, older ones the second.
FLIGHT_RECORDER_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
BUFFER_SIZE_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def current_name(names: tuple[str, str], torch_version: str | None = None) -> str:
    """The one of ``(new, old)`` this torch reads without a warning. Setting the old name on a new torch
    prints "Environment variable ... is deprecated" on every rank (seen on an H100 with torch 2.11), so
    only the current name is set; both are honoured when a user set them."""
    version = torch_version or _torch_version()
    major, minor = (int(part) for part in version.split(".")[:2])
    return names[0] if (major, minor) >= (2, 7) else names[1]


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:  # a source build without metadata: assume a current torch
        return "2.7"


_ours: set[str] = set()  # prefixes gpulab set in this process: a later run may move them, a user's stay


def flight_recorder_env(run_dir: str | os.PathLike) -> dict[str, str]:
    """The variables that send dumps to ``RUN_DIR/flight_recorder/nccl_trace_rank_N``."""
    prefix = str(Path(run_dir).resolve() / "flight_recorder" / "nccl_trace_rank_")
    return {current_name(FLIGHT_RECORDER_VARS): prefix}


def direct_dumps_to(run_dir: str | os.PathLike, environ: MutableMapping[str, str] | None = None) -> None:
    """Send this process's dumps under ``run_dir``, unless the user (or ``--log-dir``) chose a place."""
    env = os.environ if environ is None else environ
    if any(env.get(k) not in (None, *_ours) for k in FLIGHT_RECORDER_VARS):  # the user's, by either name
        return
    wanted = flight_recorder_env(run_dir)
    _ours.update(wanted.values())
    env.update(wanted)


def make_dump_dir(environ: Mapping[str, str]) -> None:
    """torch opens the dump file without creating its directory: create it before a dump can happen."""
    prefix = next((environ[k] for k in FLIGHT_RECORDER_VARS if environ.get(k)), None)
    if prefix:
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)


def trace_buffer_env(environ: Mapping[str, str], size: int = 2000) -> dict[str, str]:
    """The flight recorder's buffer (a dump needs it non-zero) under its current name, unless the user
    set it under either name."""
    if any(k in environ for k in BUFFER_SIZE_VARS):
        return {}
    return {current_name(BUFFER_SIZE_VARS): str(size)}
