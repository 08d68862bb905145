"""TensorBoard's event file (``events.out.tfevents.*``) of scalars, written without importing TensorBoard.

TensorBoard's own writer loads its whole summary package with it (protobuf, its TensorFlow stub, absl
flags, fsspec): about 0.1 s of CPU on the 2-core VM for every run, a tenth of what a 1-step
``gpulab train mlp`` spends beyond torch's own import. gpulab writes one kind of event, a step's scalars,
so it encodes that here: TFRecord framing (length, masked CRC-32C of it, the data, masked CRC-32C of
that) around an ``Event`` protobuf holding a ``Summary`` of ``simple_value`` s. The bytes are the ones
TensorBoard's protobuf would write (tests/core/callbacks/test_tfevents.py compares them, and reads the
files back with TensorBoard's loader). Reading event files (a resume's catching up) still uses
TensorBoard's reader.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Mapping
from itertools import count
from pathlib import Path


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C rotated and offset (a CRC of data holding CRCs stays informative)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: its length, the length's checksum, the data, the data's checksum."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 as its two's complement, as protobuf writes it
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string or a message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _float32(value: float) -> bytes:
    try:
        return struct.pack("<f", value)
    except OverflowError:  # beyond float32's range: infinity, as protobuf stores it
        return struct.pack("<f", math.copysign(math.inf, value))


def event(wall_time: float, step: int, what: bytes) -> bytes:
    """An ``Event``: wall_time (field 1, double), step (2, int64; proto3 leaves a zero out), then ``what``
    (file_version is field 3, summary 5, source_metadata 10)."""
    head = b"\x09" + struct.pack("<d", wall_time)
    return head + (b"\x10" + _varint(step) if step else b"") + what


def scalars_event(wall_time: float, step: int, values: Mapping[str, float]) -> bytes:
    """An ``Event`` whose ``Summary`` (field 5) holds one ``Value`` (field 1) per scalar: its tag (1) and
    its ``simple_value`` (2, a float32)."""
    summary = b"".join(
        _field(1, _field(1, tag.encode()) + b"\x15" + _float32(value)) for tag, value in values.items()
    )
    return event(wall_time, step, _field(5, summary))


class EventFile:
    """A new event file in ``log_dir``, named as TensorBoard names its own and opened with the same first
    event (``file_version`` ``brain.Event:2``). ``add_scalars`` appends; ``flush`` hands them to the OS."""

    _uids = count()  # two files opened in one second by one process get two names

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        host, pid = socket.gethostname(), os.getpid()
        self.path = log_dir / f"events.out.tfevents.{int(now):010d}.{host}.{pid}.{next(self._uids)}"
        self._file = open(self.path, "wb")  # noqa: SIM115 (open until close())
        self._file.write(
            record(event(now, 0, _field(3, b"brain.Event:2") + _field(10, _field(1, b"gpulab"))))
        )
        self._file.flush()

    def add_scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._file.write(record(scalars_event(time.time(), step, values)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
