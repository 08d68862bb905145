"""An input ``.npy``/``.npz`` judged from its headers before any array is loaded (``gpulab infer --input``,
``gpulab export --input``): one line for what cannot be fed to a model or would not fit.

Each array's ``.npy`` header (``numpy.lib.format``: dtype and shape, read from the file or from the zip
member's first bytes) gives the bytes it will take. Refused before ``np.load``: a dtype that is no number
(strings, objects, records, dates); a header that declares more bytes than its file or zip entry holds (a
928-byte ``.npy`` declaring shape (10^12, 20) was a 61-line MemoryError); a compressed entry that expands
more than ``DENSE_RATIO`` times to over ``DENSE_FLOOR_BYTES`` (a 2 MB ``.npz`` of 25M elements took infer
to 2.44 GB and no end); arrays that together would take more than half the memory free now.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
from numpy.lib import format as npy_format

from gpulab.errors import DataError
from gpulab.hardware.host_memory import available_ram_bytes

FEEDABLE_KINDS = {"b": "bool", "i": "int", "u": "uint", "f": "float"}
DENSE_RATIO = 20  # numbers compress 1-5x; zeros or a repeated pattern 100-1000x
DENSE_FLOOR_BYTES = 64 * 2**20
MEMORY_SHARE = 0.5  # the arrays, their cast copies and the predictions must fit together


class _Entry:
    """One array as its header declares it, and the bytes its file (or zip entry) stores and holds."""

    def __init__(self, name: str, fp: IO[bytes], stored: int, held: int | None, compressed: bool) -> None:
        self.name, self.stored, self.compressed = name, stored, compressed
        version = npy_format.read_magic(fp)
        if version == (1, 0):
            self.shape, _, self.dtype = npy_format.read_array_header_1_0(fp)
        elif version == (2, 0):
            self.shape, _, self.dtype = npy_format.read_array_header_2_0(fp)
        else:  # 3.0: only written for record dtypes with non-Latin-1 field names
            raise ValueError(f"an .npy of format {version[0]}.{version[1]} (record fields)")
        self.declared = math.prod(self.shape) * self.dtype.itemsize
        self.held = None if held is None else held - fp.tell()  # the data after the header


def check_input_file(path: str | Path) -> None:
    """Raise one DataError line where an input file's arrays could not be fed or would not fit."""
    path = Path(path)
    try:
        entries = _entries(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npy/.npz of arrays ({exc})") from None
    for entry in entries:
        _check_entry(path, entry)
    total = sum(e.declared for e in entries)
    free = available_ram_bytes()
    if total > MEMORY_SHARE * free:
        raise DataError(
            f"{path}: its arrays take {_size(total)} ({_shapes(entries)}) and this machine has "
            f"{_size(free)} free; give the inputs in smaller files"
        )


def _entries(path: Path) -> list[_Entry]:
    if path.is_dir():
        return [_npy(f) for f in sorted(path.glob("*.npy"))]
    if path.suffix == ".npy" or not zipfile.is_zipfile(path):  # np.load says what a non-archive is
        return [_npy(path)]
    entries = []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                raise ValueError(f"{info.filename!r} is not an .npy array")
            with archive.open(info) as fp:  # decompresses only the header's bytes
                compressed = info.compress_type != zipfile.ZIP_STORED
                entries.append(_Entry(info.filename[:-4], fp, info.compress_size, info.file_size, compressed))
    return entries


def _npy(path: Path) -> _Entry:
    with path.open("rb") as fp:
        size = path.stat().st_size
        return _Entry(path.stem, fp, size, size, compressed=False)


def _check_entry(path: Path, e: _Entry) -> None:
    what = f"{path}: array {e.name!r} ({e.dtype.str} {list(e.shape)})"
    if e.dtype.kind not in FEEDABLE_KINDS or e.dtype.fields is not None:
        raise DataError(
            f"{what} holds {_kind(e.dtype)}, which no model takes; give numbers "
            f"({', '.join(FEEDABLE_KINDS.values())})"
        )
    if e.held is not None and e.declared > e.held:
        raise DataError(
            f"{what} declares {_size(e.declared)} and its file holds {_size(e.held)}: truncated, or its "
            "header is not what was saved; save the array again with np.save/np.savez"
        )
    if e.compressed and e.declared > DENSE_FLOOR_BYTES and e.declared > DENSE_RATIO * e.stored:
        raise DataError(
            f"{what} expands from {_size(e.stored)} to {_size(e.declared)} ({e.declared // e.stored}x): "
            f"refused over {_size(DENSE_FLOOR_BYTES)} at more than {DENSE_RATIO}x; if it is real data, save "
            "it uncompressed (np.savez)"
        )


def _kind(dtype: np.dtype) -> str:
    if dtype.fields is not None:
        return "records"
    return {"U": "strings", "S": "bytes", "O": "Python objects", "M": "dates", "m": "time spans"}.get(
        dtype.kind, f"{dtype} values"
    )


def _shapes(entries: list[_Entry]) -> str:
    return ", ".join(f"{e.name} {e.dtype.str} {list(e.shape)}" for e in entries)


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"
