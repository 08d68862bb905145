"""Exports are atomic: on a really full disk (a small tmpfs) every format is one line, exit 2, nothing
partial left beside the artifact, and an earlier artifact of the same name stays as it was. ONNX once
left half an ``x.onnx`` behind a 73-line traceback, SavedModel a ``.tmp-m.savedmodel/``."""

from __future__ import annotations

import errno
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.artifact import formats
from gpulab.cli import main

PAGE = 4096


def _leave_free(disk: Path, pages: int) -> None:
    """Fill the disk, then give back ``pages`` pages: the next writer gets that far and no further."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * PAGE)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    os.truncate(filler, filler.stat().st_size - pages * PAGE)


def _contents(disk: Path) -> dict[str, bytes | None]:
    return {p.name: (p.read_bytes() if p.is_file() else None) for p in disk.iterdir() if p.name != "filler"}


@pytest.mark.parametrize("fmt", ["onnx", "exported", "torchscript"])
def test_a_disk_without_room_for_the_weights_is_one_line_before_writing(digits_run, tmpfs, capsys, fmt):
    if fmt == "onnx" and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("onnx extra not installed")
    disk = tmpfs(16 * 2**20)
    out = disk / f"digits{formats.get(fmt).SUFFIX}"
    assert main(["export", str(digits_run), "--format", fmt, "--out", str(out)]) == 0
    capsys.readouterr()
    before = _contents(disk)
    _leave_free(disk, 2)
    code = main(["export", str(digits_run), "--format", fmt, "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpulab: error")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"gpulab: error: {disk}: no space left on the device to write {out.name}")
    assert "nothing was written" in lines[0] and " bytes, " in lines[0]
    assert _contents(disk) == before  # no .tmp-*, the artifact, sidecar and parity report unchanged


def test_a_disk_filling_inside_the_onnx_writer_is_one_line_and_leaves_nothing(
    digits_run, tmpfs, capsys, monkeypatch
):
    """The weights' estimate passes (told there is room), then ONNX's protobuf writer meets the full disk."""
    pytest.importorskip("onnxruntime")
    from gpulab.artifact import atomic

    disk = tmpfs(16 * 2**20)
    _leave_free(disk, 2)
    monkeypatch.setattr(atomic, "free_bytes", lambda path: 1 << 40)
    code = main(["export", str(digits_run), "--format", "onnx", "--out", str(disk / "d.onnx")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpulab: error")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"gpulab: error: {disk}: no space left on the device to write d.onnx")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no partial d.onnx, no .tmp-*


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_a_savedmodel_on_a_full_disk_is_one_line_and_leaves_no_directory(tmp_path, tmpfs):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)

    def gpulab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, env=env
        )

    run = tmp_path / "tf"
    trained = gpulab("train", "mlp", "--engine", "tensorflow", "--out", str(run), "--max-steps", "2")
    assert trained.returncode == 0, trained.stderr
    disk = tmpfs(4 * 2**20)
    _leave_free(disk, 16)  # room for the weights (the estimate passes), not for the SavedModel's graph
    proc = gpulab("export", str(run), "--format", "savedmodel", "--out", str(disk / "m.savedmodel"))
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gpulab:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"gpulab: error: {disk}: no space left on the device to write m.savedmodel")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
