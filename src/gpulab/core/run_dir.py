"""The run directory (``--out``) of ``gpulab train``: checked and claimed before a run writes into it.

- A path that is a file where a directory is due is one line, before the recipe's data is touched, rather
  than an ``OSError`` from deep inside a logger or a checkpoint save.
- ``RunDirLock``: one run at a time per directory. Two runs into one ``--out`` would interleave
  metrics.jsonl and overwrite each other's checkpoints and summary, both exiting 0. The lock is an
  ``flock`` on ``OUT/.gpulab.lock``, which holds the holder's pid and host for the refusal message. The
  kernel drops an ``flock`` when its process dies, however it dies, so a lock file left by a killed run is
  stale by construction and simply taken over. Forked children (DataLoader workers) would share the lock
  and outlive a killed run for seconds (a resume was refused meanwhile): they close their copies at the
  fork, and a lock whose recorded holder is a dead process of this host is taken over whoever holds it.
  Only rank 0 of a launch takes it (one process per run), so the ranks of one job never refuse each other,
  and a restarted attempt's rank 0 takes it anew.
  The checkpoint directory is locked too (``ROOT/.gpulab.lock``), wherever it lives: two runs with different
  ``--out`` and one ``checkpoint_dir`` would otherwise replace and prune each other's checkpoints.
- A full disk anywhere in the run (the lock file, a log, a checkpoint) is one line naming the directory and
  the bytes free, not a traceback.
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
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path

from gpulab.checkpoint.io import LATEST, REFUSED_SUFFIX, TMP_PREFIX, step_of
from gpulab.checkpoint.read import has_checkpoint
from gpulab.checkpoint.save import BEST, free_bytes, is_disk_full
from gpulab.core.fork_inherited import close_in_children, keep_in_children
from gpulab.errors import ConfigError, GpulabError, RunDirError

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
    "trackers.json",  # the MLflow / W&B run ids a resume continues (core/callbacks/trackers.py)
    "wandb",  # W&B's own files for this run
    "export",  # `gpulab export RUN`'s default place: an artifact of the run the overwrite removes
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
        if (why := _unwritable(Path(path))) is not None:
            raise ConfigError(f"{what} {str(path)!r}: {why}; give a directory you can write to")


def _unwritable(path: Path) -> str | None:
    """Why nothing can be written at ``path`` (its nearest existing directory is on a read-only file
    system, or not writable by this user), or None. Asked before anything runs: the lock file's
    ``OSError: [Errno 30]`` was a 54-line traceback."""
    existing = next((p for p in (path.absolute(), *path.absolute().parents) if p.exists()), None)
    if existing is None:
        return None
    try:
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return f"{str(existing)!r} is on a read-only file system"
    except OSError:
        return None
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{str(existing)!r} is not writable by this user"
    return None


class RunDirLock:
    """An exclusive claim on a run directory (or a run's checkpoint directory, ``option="checkpoint_dir"``)
    for the length of a run (a context manager). ``out``: the run directory of the claiming run, named
    to a run that finds it held."""

    def __init__(self, directory: Path, option: str = "--out", out: Path | None = None) -> None:
        self.path = Path(directory) / LOCK_FILE
        self.option = option
        self.out = Path(out if out is not None else directory)
        self._fd: int | None = None
        self._made_dir = False

    def __enter__(self) -> RunDirLock:
        self._made_dir = not self.path.parent.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock()
            record = json.dumps(_me(self.out)).encode()
            os.ftruncate(self._fd, 0)
            os.write(self._fd, record)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self.__exit__()
            raise RunDirError(
                f"{self.path.parent}: no space left on the device to start a run (its lock file needs "
                f"{len(json.dumps(_me(self.out)))} bytes, {free_bytes(self.path.parent):,} are free); free "
                f"space there or give another {self.option}"
            ) from None
        return self

    def _lock(self) -> None:
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(self.path)
                os.close(fd)
                if _holder_dead(holder):  # only what it left holds the lock (an older run's workers)
                    with contextlib.suppress(OSError):
                        self.path.unlink()
                    continue
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) or _holder_alive(holder):
                    raise self._busy(_describe(holder)) from None
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no flock here: a dead pid is stale
            # A holder that was releasing may have unlinked the file we opened: lock the file at the path.
            if _same_file(fd, self.path):
                self._fd = fd
                close_in_children(fd)
            else:
                os.close(fd)

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()  # while still holding it, so no one locks a file about to vanish
            keep_in_children(self._fd)
            os.close(self._fd)
            self._fd = None
            if self._made_dir:  # a checkpoint directory no checkpoint went into is not left behind
                with contextlib.suppress(OSError):
                    self.path.parent.rmdir()

    def _busy(self, holder: str) -> RunDirError:
        what = "" if self.option == "--out" else "checkpoint directory "
        return RunDirError(
            f"{what}{self.path.parent} is in use by another run ({holder}); wait for it to finish, stop "
            f"it, or give another {self.option}"
        )


def _me(out: Path) -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "out": str(out.resolve()),
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
    into = f"the run into {holder['out']}, " if holder.get("out") else ""
    return f"{into}pid {holder['pid']} on host {holder.get('host', '?')}{since}"


def _holder_alive(holder: dict[str, object]) -> bool:
    """For filesystems without flock: the recorded holder is alive unless it is a dead pid on this host."""
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


def _holder_dead(holder: dict[str, object]) -> bool:
    """The recorded holder is a process of this host that no longer exists (another host's always holds)."""
    return bool(holder.get("pid")) and not _holder_alive(holder)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def checkpoint_root(out: Path, checkpoint_dir: str | None) -> Path:
    """Where a run's checkpoints go: ``checkpoint_dir``, else ``OUT/checkpoints`` (as the Trainers say)."""
    return Path(checkpoint_dir) if checkpoint_dir else out / "checkpoints"


def prepare(
    out: Path, checkpoint_dir: str | None, resume: str | None, overwrite: bool, started: bool | None = None
) -> None:
    """On rank 0, holding the lock: refuse to mix with a previous run, or clear it for ``overwrite``.

    ``--resume latest`` into a run that stopped before its first checkpoint starts it again from step 0
    (the Trainer says so): its logs are cleared here, as they would be mixed with the new run's. So does
    one killed during its start-up, which left only its checkpoint directory: ``started``, whether that
    directory existed before this run's lock made it (None: whether it exists now)."""
    root = checkpoint_root(out, checkpoint_dir)
    started = root.is_dir() if started is None else started
    if overwrite:
        if resume == "latest" or (resume and resume != "auto" and _inside(Path(resume), out, root)):
            raise ConfigError(
                f"--overwrite removes the checkpoints --resume {resume} would continue from: give one of them"
            )
        _clear(out, root)
        return
    found = _previous(out, root)
    no_checkpoint = not has_checkpoint(root)
    if found and not resume:
        listing = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        how = (
            "it stopped before its first checkpoint: start it again from step 0 with --resume latest"
            if no_checkpoint
            else "continue it with --resume latest"
        )
        raise RunDirError(
            f"{out} already holds a run ({listing}): {how}, or start afresh with --overwrite (removes its "
            "summary, metrics, TensorBoard logs and checkpoints), or give another --out"
        )
    if resume == "latest" and no_checkpoint:
        # An empty checkpoint directory is a run killed during its start-up: it starts from step 0 (said
        # by the Trainer), as one stopped before its first checkpoint does.
        if not found and not started:
            raise RunDirError(
                f"--resume latest: {out} holds no run to continue (no checkpoint under {root}); drop "
                "--resume to start one, or give the --out (and checkpoint_dir) of the run"
            )
        if "summary.json" in found:  # a finished run that wrote no checkpoint (checkpoints: false)
            raise RunDirError(
                f"--resume latest: {out} holds a finished run that wrote no checkpoint (under {root}), so "
                "nothing can continue it; train it again with --overwrite, or give another --out"
            )
        _clear(out, root)


def _previous(out: Path, root: Path) -> list[str]:
    """A previous run's outputs in the run directory, and checkpoints kept outside it. A user's own files
    (``--out .`` in a project) are no previous run: outputs are written beside them."""
    # The checkpoint directory counts by its checkpoints (a run's lock file alone is none).
    names = {n for n in RUN_OUTPUTS if not _same_path(out / n, root) and (out / n).exists()}
    entries = sorted(p for p in root.iterdir() if _is_checkpoint_entry(p)) if root.is_dir() else []
    if entries and _inside(root, out):
        names.add(str(root.resolve().relative_to(out.resolve())))
    return sorted(names) + ([] if _inside(root, out) else [str(p) for p in entries])


def _clear(out: Path, root: Path) -> None:
    # Entry by entry: the checkpoint directory holds this run's lock file.
    doomed = [out / name for name in RUN_OUTPUTS if not _same_path(out / name, root)]
    if root.is_dir():
        doomed += [p for p in root.iterdir() if _is_checkpoint_entry(p)]
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _is_checkpoint_entry(path: Path) -> bool:
    """``latest``, ``step-*`` (refused ones kept aside too) and the ``.tmp-*`` leftovers of a save."""
    step = step_of(path.with_name(path.name.split(REFUSED_SUFFIX)[0]))
    return path.name in (LATEST, BEST) or path.name.startswith(TMP_PREFIX) or step is not None


def _same_path(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _inside(path: Path, *dirs: Path) -> bool:
    resolved = path.resolve()
    return any(resolved == d.resolve() or d.resolve() in resolved.parents for d in dirs)


@contextlib.contextmanager
def claim(out: Path, rank: int, checkpoint_dir: str | None = None) -> Iterator[None]:
    """Hold the locks of ``out`` and of the checkpoint directory for the run on rank 0 (the other ranks of
    the job share rank 0's claim); on every rank, a full disk ends the run in one line."""
    with _full_disk_in_one_line(out):
        if rank != 0:
            yield
            return
        root = checkpoint_root(out, checkpoint_dir)
        same = _same_path(root, out)  # one directory, one lock (a second flock would refuse this run)
        with RunDirLock(out), nullcontext() if same else RunDirLock(root, "checkpoint_dir", out):
            yield


@contextlib.contextmanager
def _full_disk_in_one_line(out: Path) -> Iterator[None]:
    """A write that found the disk full (a log, the summary, the weights) ends the run in one line; a
    checkpoint's own message (``checkpoint.save``) says more, and passes through."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, GpulabError) or not is_disk_full(exc):
            raise
        where = next((e.filename for e in _chain(exc) if getattr(e, "filename", None)), None)
        place = Path(where).parent if where else out
        raise RunDirError(
            f"{place}: no space left on the device{f' to write {Path(where).name}' if where else ''} "
            f"({free_bytes(place):,} bytes free); free space there, or give --out (and checkpoint_dir) "
            "on a bigger disk"
        ) from None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
