"""Which steps W&B holds for a run: the history rows in the run's transaction logs under ``OUT/wandb/``.

``wandb-core`` writes every record it takes to ``OUT/wandb/*-ID/run-ID.wandb`` (online runs too, before
sending), so these files are what W&B acknowledged: a row handed to ``run.log`` just before a SIGKILL may
never get there. The format (wandb 0.31 ships no Python reader of it): a 7-byte header (``:W&B``, magic
0xBEE1, version 0), then LevelDB's log format: 32 KiB blocks of chunks, each with a 7-byte header (CRC32,
little-endian length, type: 1 full, 2 first, 3 middle, 4 last) holding a serialised ``Record``. A file cut
short by a kill ends where its last whole record does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
_FULL, _LAST = 1, 4


def held_steps(out_dir: str | Path | None, run_id: str) -> set[int]:
    """The history steps of every earlier attempt of W&B run ``run_id`` under ``OUT/wandb``."""
    if not out_dir:
        return set()
    files = {p.resolve() for p in Path(out_dir, "wandb").glob(f"*-{run_id}/run-{run_id}.wandb")}
    steps: set[int] = set()
    for path in sorted(files):
        for data in _records(path.read_bytes()):
            steps.update(_history_step(data))
    return steps


def _records(data: bytes) -> Iterator[bytes]:
    if data[:4] != b":W&B":
        return
    pos, parts = HEADER, []
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if left < HEADER or (kind == 0 and length == 0):  # a block's zero-padded tail
            pos += left
            continue
        if pos + HEADER + length > len(data):  # the last record, cut short
            return
        parts.append(data[pos + HEADER : pos + HEADER + length])
        pos += HEADER + length
        if kind in (_FULL, _LAST):
            yield b"".join(parts)
            parts = []


def _history_step(data: bytes) -> list[int]:
    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()
    try:
        record.ParseFromString(data)
    except Exception:  # a record damaged by the kill
        return []
    return [record.history.step.num] if record.WhichOneof("record_type") == "history" else []
