"""Reads the ``run-ID.wandb`` file an offline W&B run writes (wandb 0.31 ships no Python reader of it).

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then LevelDB's log
format: 32 KiB blocks of chunks, each with a 7-byte header (CRC32, little-endian length, type: 1 full,
2 first, 3 middle, 4 last) holding a serialised ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, LAST = 1, 4


def records(path: Path) -> Iterator[Any]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, parts = 7, []
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if left < CHUNK_HEADER or (kind == 0 and length == 0):  # a block's zero-padded tail
            pos += left
            continue
        parts.append(data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length])
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def _items(items) -> dict[str, Any]:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def read_run(path: Path) -> dict[str, Any]:
    """``run_id``, ``project``, ``config`` (first write), ``history`` (one dict per logged row) and
    ``summary`` (the last value of each key) of one offline run file."""
    out: dict[str, Any] = {"history": [], "summary": {}, "config": {}}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run_id"], out["project"] = record.run.run_id, record.run.project
            out["config"] = _items(record.run.config.update)
        elif kind == "history":
            out["history"].append(_items(record.history.item))
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
    return out
