"""Durable file operations and the checkpoint MANIFEST: the storage primitives under ``api.py``.

Durability rule used throughout: a file's bytes are fsync'd before the file is renamed into place, and
the directory holding a rename is fsync'd after it, so after a crash or power loss a name either points
at complete content or does not exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gpulab import engine_registry as engines
from gpulab.errors import CheckpointError, choices
from gpulab.hooks import hook, hook_seconds

MANIFEST = "MANIFEST.json"
LATEST = "latest"
WEIGHTS = "model.safetensors"
STATE = "state.pt"
META = "meta.json"
REQUIRED = (WEIGHTS, STATE, META)
TMP_PREFIX = ".tmp-"
REFUSED_SUFFIX = ".refused"  # a checkpoint a resume refused, kept aside (never deleted)
STEP_DIR = re.compile(r"^step-(\d{8,})$")
_CHUNK = 1 << 20

# Test hook (see docs/RELIABILITY.md; read only with GPULAB_TEST_HOOKS=1, gpulab/hooks.py):
# GPULAB_CHECKPOINT_PAUSE_AT=<point> makes the saver write <point>
# to the file named by GPULAB_CHECKPOINT_PAUSE_SIGNAL and sleep there, so a test can SIGKILL it.
PAUSE_POINTS = ("after-weights", "before-rename", "before-latest")


class UnreadableCheckpoint(CheckpointError):
    """A checkpoint file this user may not read: not damaged, so never refused and set aside for an older
    step (a resume once moved it aside and went back a step): one line naming it and the fix, exit 2."""


def pause_point(name: str) -> None:
    """Stop at a named point of a save when the test hook asks for it; a no-op otherwise."""
    if hook("GPULAB_CHECKPOINT_PAUSE_AT") != name:
        return
    seconds = hook_seconds("GPULAB_CHECKPOINT_PAUSE_SECONDS", 60.0)  # a bad value: said before pausing
    signal_file = hook("GPULAB_CHECKPOINT_PAUSE_SIGNAL")
    if signal_file:
        write_text_atomic(Path(signal_file), name)
    time.sleep(seconds)


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(path: Path) -> int | None:
    """The step a ``step-NNNNNNNN`` directory name stands for, or None for any other name."""
    match = STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old content or the new, never a mix."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        write_bytes_durably(tmp, text.encode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not leave the temp file behind
        raise
    fsync_dir(path.parent)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: Path, layout: str = "full") -> None:
    """List every other file in ``directory`` with its size and sha256; written last, fsync'd."""
    files = {
        p.name: {"size": p.stat().st_size, "sha256": sha256_of(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    doc = {"format": "gpulab-checkpoint", "version": 1, "files": files}
    if layout != "full":  # absent means full, as in every checkpoint written before layouts existed
        doc["layout"] = layout
    write_bytes_durably(directory / MANIFEST, (json.dumps(doc, indent=2) + "\n").encode())


def read_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """The manifest's file table; raises CheckpointError if it is missing, unreadable or malformed."""
    path = directory / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{path}: missing manifest (the checkpoint was never completed)")
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        layout = engines.checkpoint_layout(doc.get("layout", "full"))  # absent: as written before layouts
        ok = isinstance(files, dict) and all(
            isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("sha256"), str)
            for v in files.values()
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable manifest ({one_line(exc)})") from exc
    if not ok or any(Path(name).name != name or name in ("", ".", "..") for name in files):
        raise CheckpointError(f"{path}: malformed manifest (expected files: {{name: {{size, sha256}}}})")
    if layout is None:
        raise CheckpointError(
            f"{path}: layout {doc.get('layout')!r} is no engine's checkpoint; "
            f"valid: {choices(engines.layouts())}"
        )
    unlisted = [name for name in layout.required(files) if name not in files]
    if unlisted:
        raise CheckpointError(f"{path}: manifest does not list {', '.join(unlisted)}")
    return files


def manifest_layout(directory: Path) -> str:
    """``full`` or ``sharded``: how the checkpoint in ``directory`` holds the model (manifest read only)."""
    read_manifest(directory)
    return json.loads((directory / MANIFEST).read_text()).get("layout", "full")


def file_status(directory: Path, name: str, record: dict[str, Any], *, hash_files: bool = True) -> str:
    """``ok``, ``missing``, ``size mismatch`` or ``checksum mismatch`` for one manifest entry."""
    path = directory / name
    if not path.is_file():
        return "missing"
    if path.stat().st_size != record["size"]:
        return "size mismatch"
    try:
        if hash_files and sha256_of(path) != record["sha256"]:
            return "checksum mismatch"
    except OSError as exc:  # no read permission: one line, not a traceback from deep in the hashing
        return f"unreadable ({exc.strerror}): give this user read permission on it, or run as its owner"
    return "ok"


def verify_manifest(
    directory: Path, *, hash_files: bool = True, hash_only: Collection[str] | None = None
) -> None:
    """Raise CheckpointError naming the first file that is missing or differs from the manifest.

    ``hash_files=False`` checks presence and sizes only: cheap enough to run over every checkpoint of a
    root when pruning, but it does not catch same-size corruption. ``hash_only``: hash just these files
    (a rank's share, when the ranks split the hashing) and check the others' sizes.
    """
    _verify_records(directory, read_manifest(directory), hash_files, hash_only)


def _verify_records(
    directory: Path, records: dict[str, dict[str, Any]], hash_files: bool, hash_only: Collection[str] | None,
    manifest: str = MANIFEST,
) -> None:  # fmt: skip
    said = "MANIFEST" if manifest == MANIFEST else manifest
    for name, record in records.items():
        hashed = hash_files and (hash_only is None or name in hash_only)
        status = file_status(directory, name, record, hash_files=hashed)
        if status == "size mismatch":
            found = (directory / name).stat().st_size
            status += f" ({said} says {record['size']} bytes, file has {found})"
        elif status == "checksum mismatch":
            status += f" (sha256 differs from {manifest}: the file was changed or corrupted)"
        if status.startswith("unreadable"):
            raise UnreadableCheckpoint(f"{directory / name}: {status}")
        if status != "ok":
            raise CheckpointError(f"{directory / name}: {status}")


def write_files_manifest(directory: Path, manifest: str, names: Collection[str]) -> None:
    """A manifest of chosen files of a directory that holds other things too (a TensorFlow run's
    ``model.weights.h5``), in the checkpoint MANIFEST's format; replaced atomically."""
    files = {n: {"size": (directory / n).stat().st_size, "sha256": sha256_of(directory / n)} for n in names}
    doc = {"format": "gpulab-files", "version": 1, "files": files}
    write_text_atomic(directory / manifest, json.dumps(doc, indent=2) + "\n")


def verify_files(directory: Path, manifest: str) -> None:
    """Raise CheckpointError naming the manifest that is missing or unreadable, or the first file that
    differs from it (the same lines as ``verify_manifest``)."""
    path = directory / manifest
    try:
        files = json.loads(path.read_text())["files"]
        ok = isinstance(files, dict) and all(
            Path(n).name == n and isinstance(r, dict) and isinstance(r.get("size"), int)
            and isinstance(r.get("sha256"), str)
            for n, r in files.items()
        )  # fmt: skip
    except FileNotFoundError:
        raise CheckpointError(
            f"{path}: missing manifest (the run never finished, or an older gpulab wrote it: train it again)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable manifest ({one_line(exc)})") from exc
    if not ok or not files:
        raise CheckpointError(f"{path}: malformed manifest (expected files: {{name: {{size, sha256}}}})")
    _verify_records(directory, files, True, None, manifest)


def is_complete(directory: Path, *, hash_files: bool = True) -> bool:
    try:
        verify_manifest(directory, hash_files=hash_files)
    except CheckpointError:
        return False
    return True


def remove_stale_tmp(root: Path) -> None:
    """Remove the ``.tmp-*`` leftovers of killed saves in ``root``.

    An entry whose name ends in the pid of a process that is still running (another saver) is left alone.
    A checkpoint moved aside for a re-save of the same step (``.tmp-old-step-…``) is put back when the
    re-save died before its replacement was renamed into place and the old copy still verifies.
    """
    for entry in root.iterdir():
        if not entry.name.startswith(TMP_PREFIX) or _owner_alive(entry.name):
            continue
        if entry.name.startswith(f"{TMP_PREFIX}old-") and entry.is_dir():
            final = root / entry.name[len(f"{TMP_PREFIX}old-") :].rsplit("-", 1)[0]
            if step_of(final) is not None and not final.exists() and is_complete(entry):
                os.rename(entry, final)
                fsync_dir(root)
                continue
        remove_path(entry)


def set_aside(directory: Path) -> Path:
    """Rename a refused checkpoint to ``NAME.refused`` (``.refused-2``, ...): no longer a ``step-*``
    directory, so nothing resolves, loads or prunes it, and it stays for a person to look at."""
    target, n = directory.with_name(directory.name + REFUSED_SUFFIX), 2
    while target.exists():
        target, n = directory.with_name(f"{directory.name}{REFUSED_SUFFIX}-{n}"), n + 1
    os.rename(directory, target)
    fsync_dir(directory.parent)
    return target


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _owner_alive(name: str) -> bool:
    pid = name.rsplit("-", 1)[-1]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # a process we may not signal still exists
    return True


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
