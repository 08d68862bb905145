"""Every file or directory an export writes goes through here: written under a temporary sibling name and
renamed onto its own only once whole, so a reader (or the next export) never finds half an artifact.

A full disk anywhere inside a format's writer (ONNX's protobuf, torch's zip, TensorFlow's SaveV2, a
compiler's package) removes the temporary sibling and becomes one line naming the place, the artifact
and the bytes free; an earlier artifact of the same name is left as it was. ONNX once left a partial
``x.onnx`` behind a 73-line traceback, SavedModel a ``.tmp-m.savedmodel/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gpulab.artifact.ownership import WRITE_ERRNOS, OutputRefused, write_failure
from gpulab.checkpoint.io import TMP_PREFIX, fsync_dir, remove_path
from gpulab.checkpoint.save import free_bytes, is_disk_full
from gpulab.errors import GpulabError

T = TypeVar("T")


class ExportDiskFull(GpulabError):
    """No space left for an export's artifact or its records (exit 2, one line)."""


def write_atomically(out: Path, write: Callable[[Path], T], needed: int = 0, option: str = "--out") -> T:
    """``write(tmp)`` writes the artifact at ``tmp`` (same directory, same suffix: a writer may insist on
    ``.pt2``); then ``tmp`` replaces ``out``. Whatever ``write`` raises, nothing is left at ``tmp``.

    ``needed``: the bytes the artifact will take at least (its weights), checked against the free space
    first. torch's zip writer (exported, aoti, torchscript) cannot fail cleanly: a short write leaves it
    in a state its destructor aborts the process on, so a disk that cannot hold the weights is refused
    before it starts. A place that cannot be written (read-only, no permission, a file where a folder
    goes) is one line naming it and ``option``, the fix."""
    # A name without a suffix gets one: torch's zip writer takes a file's name up to its last dot as the
    # archive's, and refuses the empty name of ".tmp-PID-model".
    tmp = out.with_name(f"{TMP_PREFIX}{os.getpid()}-{out.name}{'' if out.suffix else '.tmp'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if needed and (free := free_bytes(out.parent)) < needed:
            raise ExportDiskFull(
                f"{out.parent}: no space left on the device to write {out.name} (it needs about "
                f"{needed:,} bytes, {free:,} are free); nothing was written: free space there or give "
                "--out on a bigger disk"
            )
        remove_path(tmp)
        result = write(tmp)
        _replace(tmp, out)
    except BaseException as exc:
        remove_path(tmp)
        if isinstance(exc, Exception) and not isinstance(exc, GpulabError) and is_disk_full(exc):
            raise ExportDiskFull(
                f"{out.parent}: no space left on the device to write {out.name} ({free_bytes(out.parent):,} "
                "bytes are free); nothing was written: free space there or give --out on a bigger disk"
            ) from None
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:  # read-only, permission, a file in the way
            raise OutputRefused(write_failure(out, exc, option)) from None
        raise
    return result


def write_text(path: Path, text: str) -> Path:
    """A sidecar or report (``.export.json``, ``.parity.json``, predictions), atomically."""
    write_atomically(path, lambda tmp: tmp.write_text(text))
    return path


def _replace(tmp: Path, out: Path) -> None:
    """``tmp`` onto ``out``: a file by ``os.replace``; a directory (SavedModel) by moving the old one
    aside first, since a rename cannot replace a directory that holds files."""
    if out.is_dir() and not out.is_symlink():
        aside = out.with_name(f"{TMP_PREFIX}old-{os.getpid()}-{out.name}")
        os.rename(out, aside)
        try:
            os.rename(tmp, out)
        except BaseException:
            os.rename(aside, out)
            raise
        remove_path(aside)
    else:
        if out.is_symlink():  # never written through: the link itself is replaced
            out.unlink()
        os.replace(tmp, out)
    fsync_dir(out.parent)
