"""``tree_hash(root)``: every path under ``root`` with its kind and bytes, hashed: equal before and after a
refused write means nothing of the user's changed (issue 40: "a test hashes the user's tree")."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(root).rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_symlink():
            h.update(b"L" + os.readlink(path).encode())
        elif path.is_file():
            h.update(b"F" + _content(path))
        else:
            h.update(b"D")
        h.update(b"M%o" % (path.lstat().st_mode & 0o7777))
    return h.hexdigest()


def _content(path: Path) -> bytes:
    """A file's bytes; a sparse one (a fuzz case's "huge file") by its size and its first and last MiB."""
    size = path.stat().st_size
    if size <= 8 << 20:
        return path.read_bytes()
    with open(path, "rb") as handle:
        head = handle.read(1 << 20)
        handle.seek(size - (1 << 20))
        return b"%d" % size + head + handle.read()
