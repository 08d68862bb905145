"""gpulab replaces only what it wrote. A verb's output path (``export --out``, ``checkpoint export --to``,
``infer --out``) that already holds something is replaced only when that something is an earlier output of
the same kind that gpulab wrote, as its record says (an export's sidecar, the metadata header of
``checkpoint export``'s safetensors, the zip comment of infer's predictions, the marker file of a bench,
tune or profile folder); anything else is one line, exit 2, nothing touched. ``export --out
RUN/checkpoints`` once exited 0 with every checkpoint gone (the directory moved aside and removed to make
room for the ONNX file), ``--out RUN`` took the whole run."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

from gpulab.errors import GpulabError


class OutputRefused(GpulabError):
    """An output path holds something gpulab did not write (exit 2, nothing touched)."""


def check_replaceable(out: Path, kind: str, is_ours: Callable[[Path], bool], option: str = "--out") -> None:
    """Refuse ``out`` unless it does not exist yet or ``is_ours(out)`` (an earlier ``kind`` of gpulab's).
    A symbolic link is never followed or replaced: what it points at is the user's."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink():
        what = "a symbolic link"
    elif is_ours(out):
        return
    else:
        what = "a directory" + _holding(out) if out.is_dir() else "a file"
    raise OutputRefused(
        f"{option} {out}: {what} that gpulab did not write as {kind} already exists there; nothing was "
        f"touched: give a new path (e.g. {_suggest(out)}), or move it away yourself"
    )


def _holding(directory: Path) -> str:
    try:
        count = sum(1 for _ in directory.iterdir())
    except OSError:
        return ""
    return f" holding {count} entr{'y' if count == 1 else 'ies'}" if count else ""


def _suggest(out: Path) -> str:
    if out.is_dir() and not out.is_symlink():
        return str(out / "model")  # an artifact inside the folder, beside the user's files
    return str(out.with_name(f"{out.stem}-2{out.suffix}"))


def is_export_of(fmt: str) -> Callable[[Path], bool]:
    """An earlier ``gpulab export --format fmt`` artifact: its ``.export.json`` sidecar names that format."""
    from gpulab.artifact.sidecar import read_sidecar

    return lambda path: read_sidecar(path).get("format") == fmt


def check_export_out(out: Path, fmt: str) -> None:
    check_replaceable(Path(out), f"its {fmt} export", is_export_of(fmt))
    check_place(Path(out))


# A folder gpulab writes several reports into (bench, tune, profile) holds this file, naming the verb: the
# same verb may write there again; any other non-empty folder is the user's.
FOLDER_MARKER = ".gpulab-output.json"


def folder_kind(folder: Path) -> str | None:
    """The verb whose marker ``folder`` holds, or None."""
    try:
        found = json.loads((folder / FOLDER_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found.get("written_by") if isinstance(found, dict) else None


def check_output_folder(out: Path, verb: str, option: str = "--out") -> None:
    """Refuse ``out`` as ``verb``'s output folder unless it is new, an empty folder, or one ``verb`` wrote
    before. Reads only: called before a framework is imported."""
    out = Path(out)
    if out.is_dir() and not out.is_symlink():
        try:
            empty = not any(out.iterdir())
        except OSError as exc:
            raise OutputRefused(
                f"{option} {out}: unreadable ({exc.strerror}); give a folder you can write"
            ) from None
        if empty:
            return
    check_replaceable(out, f"gpulab {verb}'s output", lambda path: folder_kind(path) == verb, option)
    check_place(out, option)


def claim_output_folder(out: Path, verb: str, option: str = "--out") -> Path:
    """``check_output_folder``, then the folder made and marked as ``verb``'s: where its writer starts."""
    from gpulab.checkpoint.io import write_text_atomic

    check_output_folder(out, verb, option)
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if folder_kind(out) != verb:
            write_text_atomic(out / FOLDER_MARKER, json.dumps({"written_by": verb}) + "\n")
    except OSError as exc:
        raise OutputRefused(write_failure(out, exc, option)) from None
    return out


def check_place(out: Path, option: str = "--out") -> None:
    """The nearest existing folder above ``out`` is a folder gpulab may write in: a path under a file
    (``--out afile/x``), a read-only disk or a folder without write permission is one line before anything
    runs (a long export once failed only at its last rename)."""
    for parent in Path(out).absolute().parents:
        if not (parent.exists() or parent.is_symlink()):
            continue
        if not parent.is_dir():
            raise OutputRefused(
                f"{option} {out}: {parent} is a file, not a folder; nothing was written: give a path in "
                "a folder"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            read_only = os.statvfs(parent).f_flag & os.ST_RDONLY
            why = _FIXES[errno.EROFS if read_only else errno.EACCES]
            raise OutputRefused(f"{option} {out}: cannot write in {parent}: {why}; nothing was written")
        return


_FIXES = {
    errno.EROFS: "the file system is read-only: give a path on a writable disk",
    errno.EACCES: "permission denied: give a folder you can write, or change its permissions",
    errno.EPERM: "not permitted: give a folder you can write, or change its permissions",
    errno.ENOTDIR: "a part of the path is a file, not a folder: give a path in a folder",
    errno.EISDIR: "a folder is in the way: give a file path",
    errno.EEXIST: "a file is in the way of a folder: give a path in a folder",
    errno.ENOSPC: "no space left on the device: free space there or give a path on a bigger disk",
    errno.ENAMETOOLONG: "the name is too long: give a shorter path",
}
WRITE_ERRNOS = frozenset(_FIXES)


def write_failure(where: Path, exc: OSError, option: str = "--out") -> str:
    """One line for an ``OSError`` writing ``where``: the place, what the system said, the fix."""
    place = exc.filename or where
    why = _FIXES.get(exc.errno or 0, f"{exc.strerror or exc}: give another path")
    return f"{option} {where}: cannot write {place}: {why}; nothing was written"
