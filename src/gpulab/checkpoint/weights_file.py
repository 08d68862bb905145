"""``gpulab checkpoint export``'s file: a checkpoint's ``model.safetensors`` with gpulab's mark in its own
metadata header (``__metadata__``: ``gpulab``, ``gpulab_step``), the tensors' bytes copied as they are.

The mark is what lets a later ``checkpoint export --to`` replace the file, and nothing else at that path
(``artifact/ownership.py``); it travels inside the one file, so no sidecar can be lost or left behind.
Framework-free: the header is JSON behind an 8-byte length, read and rewritten without loading a tensor.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from gpulab.errors import CheckpointError

MARK = "checkpoint export"
HEADER_LIMIT = 100 << 20  # safetensors' own bound on a header's size


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file; ``CheckpointError`` where it is not one."""
    try:
        with open(path, "rb") as handle:
            size = struct.unpack("<Q", handle.read(8).ljust(8, b"\xff"))[0]
            if size > HEADER_LIMIT:
                raise ValueError(f"a header of {size:,} bytes")
            header = json.loads(handle.read(size))
    except (OSError, ValueError, struct.error) as exc:
        raise CheckpointError(f"{path}: not a safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is no JSON object)")
    return header


def is_marked(path: Path) -> bool:
    """Whether ``path`` is a file ``gpulab checkpoint export`` wrote."""
    try:
        metadata = read_header(path).get("__metadata__")
    except CheckpointError:
        return False
    return isinstance(metadata, dict) and metadata.get("gpulab") == MARK


def write_marked(source: Path, target: Path, step: int | None) -> None:
    """``source``'s tensors to ``target`` under a header that carries gpulab's mark and the step. The
    offsets in a header count from the end of the header, so a longer header moves nothing else."""
    header = read_header(source)
    metadata = header.get("__metadata__") if isinstance(header.get("__metadata__"), dict) else {}
    header["__metadata__"] = {**metadata, "gpulab": MARK, "gpulab_step": str(step)}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data stays 8-byte aligned, as safetensors writes it
    with open(source, "rb") as src, open(target, "wb") as dst:
        src.seek(8 + struct.unpack("<Q", src.read(8))[0])
        dst.write(struct.pack("<Q", len(encoded)) + encoded)
        shutil.copyfileobj(src, dst, 1 << 20)
