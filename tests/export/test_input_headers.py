"""`gpulab infer --input` and `gpulab export --input` judge an input file from its headers: a dtype no model
takes, a header that declares more than its file holds, a compressed entry that expands past the cap, or
arrays that would not fit in the memory free now, are one line and exit 2, with nothing big allocated
(tracemalloc sees NumPy's allocations) and the model never loaded."""

from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from gpulab.cli import main
from gpulab.hardware.host_memory import available_ram_bytes

ALLOCATED_AT_MOST = 16 * 2**20


def _npy_header(fp, shape: tuple[int, ...], descr: str = "<f4") -> None:
    npy_format.write_array_header_1_0(fp, {"descr": descr, "fortran_order": False, "shape": shape})


def compressed_bomb(path: Path, elements: int = 25_000_000) -> Path:
    """An .npz whose one float32 entry of ``elements`` zeros is written in chunks (never held whole)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("x.npy", "w") as fp:
        _npy_header(fp, (elements,))
        chunk = bytes(4 * 2**20)
        left = elements * 4
        while left:
            fp.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
    return path


def lying_npy(path: Path) -> Path:
    """A small .npy whose header declares shape (10^12, 20)."""
    with path.open("wb") as fp:
        _npy_header(fp, (10**12, 20), "<f8")
        fp.write(bytes(800))
    return path


def larger_than_memory(path: Path) -> Path:
    """An .npy that holds (sparsely, no disk used) as many bytes as the memory free now."""
    elements = available_ram_bytes() // 4 + 1
    with path.open("wb") as fp:
        _npy_header(fp, (elements,))
        fp.truncate(fp.tell() + elements * 4)
    return path


def strings(path: Path) -> Path:
    np.savez(path, x=np.array(["a", "bc"] * 8))
    return path


def objects(path: Path) -> Path:
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return path


CASES = {
    "bomb.npz": (compressed_bomb, "expands from"),
    "lying.npy": (lying_npy, "declares 145.5 TiB and its file holds 800 bytes"),
    "huge.npy": (larger_than_memory, "free; give the inputs in smaller files"),
    "strings.npz": (strings, "holds strings, which no model takes"),
    "objects.npy": (objects, "holds Python objects, which no model takes"),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    return {name: make(folder / name) for name, (make, _) in CASES.items()}


def _refused(capsys, argv: list[str]) -> tuple[int, list[str], int]:
    """Exit code, stderr lines and the peak of what Python and NumPy allocated for a second refusal (the
    first one imports the verb's modules)."""
    main([str(a) for a in argv])
    capsys.readouterr()
    tracemalloc.start()
    try:
        code = main([str(a) for a in argv])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines(), peak


@pytest.mark.parametrize("name", list(CASES))
def test_infer_refuses_an_input_from_its_headers(inputs, tmp_path, capsys, name):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"never loaded: the input is refused first")
    code, lines, peak = _refused(capsys, ["infer", model, "--input", inputs[name]])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"gpulab: error: {inputs[name]}: ") and CASES[name][1] in lines[0]
    assert peak < ALLOCATED_AT_MOST
    assert not list(tmp_path.glob("*predictions*"))


@pytest.mark.parametrize("name", ["bomb.npz", "lying.npy", "strings.npz"])
def test_export_refuses_an_input_before_rebuilding_the_model(digits_run, inputs, tmp_path, capsys, name):
    before = sorted(p.relative_to(digits_run) for p in digits_run.rglob("*"))
    out = tmp_path / "digits.onnx"
    argv = ["export", digits_run, "--format", "onnx", "--input", inputs[name], "--out", out]
    code, lines, peak = _refused(capsys, argv)
    assert code == 2 and len(lines) == 1 and CASES[name][1] in lines[0], lines
    assert peak < ALLOCATED_AT_MOST
    assert sorted(p.relative_to(digits_run) for p in digits_run.rglob("*")) == before
    assert list(tmp_path.iterdir()) == []
