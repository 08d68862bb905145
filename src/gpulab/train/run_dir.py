"""The run directory (``--out``) of ``gpulab train``: checked and claimed before a run writes into it.

- A path that is a file where a directory is due is one line, before the recipe's data is touched, rather
  than an ``OSError`` from deep inside a logger or a checkpoint save.
- ``RunDirLock``: one run at a time per directory. Two runs into one ``--out`` would interleave
  metrics.jsonl and overwrite each other's checkpoints and summary, both exiting 0. The lock is an
  ``flock`` on ``OUT/.gpulab.lock``, which holds the holder's pid and host for the refusal message. The
  kernel drops an ``flock`` when its process dies, however it dies, so a lock file left by a killed run is
  stale by construction and simply taken over. Only rank 0 of a launch takes it (one process per run), so
  the ranks of one job never refuse each other, and a restarted attempt's rank 0 takes it anew.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from gpulab.checkpoint.io import LATEST, TMP_PREFIX, step_of
from gpulab.errors import ConfigError, RunDirError

LOCK_FILE = ".gpulab.lock"
# What a run writes into OUT (checkpoints: unless checkpoint_dir puts them elsewhere). --overwrite removes
# these and nothing else, so a mistyped --out (a home directory) loses no file gpulab did not write.
RUN_OUTPUTS = (
    "summary.json",
    "metrics.jsonl",
    "tensorboard",
    "checkpoints",
    "model.weights.h5",
    "model.weights.manifest.json",
)


def check_output_dirs(out: Path, checkpoint_dir: str | None) -> None:
    """``out`` and ``checkpoint_dir`` (and every parent) must be directories or not exist yet."""
    for what, path in (("--out", out), ("checkpoint_dir", checkpoint_dir)):
        if path is None:
            continue
        blocker = next((p for p in (Path(path), *Path(path).parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise ConfigError(
                f"{what} {str(path)!r}: {str(blocker)!r} is a file, not a directory; give a directory path "
                "(or move the file away)"
            )


class RunDirLock:
    """An exclusive claim on a run directory for the length of a run (a context manager)."""

    def __init__(self, out: Path) -> None:
        self.path = Path(out) / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> RunDirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _describe(_read_holder(self.path))
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) or _holder_alive(self.path):
                    raise self._busy(holder) from None
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no flock here: a dead pid is stale
            # A holder that was releasing may have unlinked the file we opened: lock the file at the path.
            if _same_file(fd, self.path):
                self._fd = fd
            else:
                os.close(fd)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, json.dumps(_me()).encode())
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()  # while still holding it, so no one locks a file about to vanish
            os.close(self._fd)
            self._fd = None

    def _busy(self, holder: str) -> RunDirError:
        return RunDirError(
            f"{self.path.parent} is in use by another run ({holder}); wait for it to finish, stop it, "
            "or give another --out"
        )


def _me() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _read_holder(path: Path) -> dict[str, object]:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, object]) -> str:
    if not holder.get("pid"):
        return "a run that is just starting"
    since = f", since {holder['since']}" if holder.get("since") else ""
    return f"pid {holder['pid']} on host {holder.get('host', '?')}{since}"


def _holder_alive(path: Path) -> bool:
    """For filesystems without flock: the recorded holder is alive unless it is a dead pid on this host."""
    holder = _read_holder(path)
    if not holder.get("pid"):
        return False
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, so it holds
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def prepare(out: Path, checkpoint_dir: str | None, resume: str | None, overwrite: bool) -> None:
    """On rank 0, holding the lock: refuse to mix with a previous run, or clear it for ``overwrite``."""
    root = Path(checkpoint_dir) if checkpoint_dir else out / "checkpoints"
    if overwrite:
        if resume == "latest" or (resume and resume != "auto" and _inside(Path(resume), out, root)):
            raise ConfigError(
                f"--overwrite removes the checkpoints --resume {resume} would continue from: give one of them"
            )
        _clear(out, root)
        return
    found = _previous(out, root)
    if found and not resume:
        listing = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise RunDirError(
            f"{out} already holds a run ({listing}): continue it with --resume latest, or start afresh "
            "with --overwrite (removes its summary, metrics, TensorBoard logs and checkpoints), or give "
            "another --out"
        )


def _previous(out: Path, root: Path) -> list[str]:
    """A previous run's outputs in the run directory, and checkpoints kept outside it. A user's own files
    (``--out .`` in a project) are no previous run: outputs are written beside them."""
    found = sorted(p.name for p in out.iterdir() if p.name in RUN_OUTPUTS) if out.is_dir() else []
    if root.is_dir() and not _inside(root, out):
        found += [str(p) for p in sorted(root.iterdir()) if _is_checkpoint_entry(p)]
    return found


def _clear(out: Path, root: Path) -> None:
    doomed = [out / name for name in RUN_OUTPUTS]
    if root.is_dir() and not _inside(root, out):
        doomed += [p for p in root.iterdir() if _is_checkpoint_entry(p)]
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _is_checkpoint_entry(path: Path) -> bool:
    return path.name == LATEST or path.name.startswith(TMP_PREFIX) or step_of(path) is not None


def _inside(path: Path, *dirs: Path) -> bool:
    resolved = path.resolve()
    return any(resolved == d.resolve() or d.resolve() in resolved.parents for d in dirs)


@contextlib.contextmanager
def claim(out: Path, rank: int) -> Iterator[None]:
    """Hold ``out``'s lock for the run on rank 0; the other ranks of the job share rank 0's claim."""
    if rank != 0:
        yield
        return
    with RunDirLock(out):
        yield
