"""gpulab replaces only what it wrote. A verb's output path (``export --out``, ``checkpoint export --to``,
``infer --out``) that already holds something is replaced only when that something is an earlier output of
the same kind that gpulab wrote, as its record beside it says; anything else is one line, exit 2, nothing
touched. ``export --out RUN/checkpoints`` once exited 0 with every checkpoint gone (the directory moved
aside and removed to make room for the ONNX file), ``--out RUN`` took the whole run."""

from __future__ import annotations

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
    elif out.is_dir():
        what = "a directory" + ("" if is_ours(out) else _holding(out))
    else:
        what = "a file"
    if not out.is_symlink() and is_ours(out):
        return
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
    check_replaceable(Path(out), f"a {fmt} export", is_export_of(fmt))
