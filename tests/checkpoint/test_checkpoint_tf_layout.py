"""The storage layer with the TensorFlow engine's files (no TensorFlow needed: its two files are opaque
bytes here): ``commit_checkpoint`` without a state.pt, the MANIFEST's ``tensorflow`` layout, and the torch
side's readers telling such a checkpoint apart in one line instead of failing on a missing state.pt."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpulab.checkpoint.io import LATEST, step_dir_name
from gpulab.checkpoint.save import commit_checkpoint, meta_bytes
from gpulab.engines.tensorflow.checkpoint_layout import TF_LAYOUT
from gpulab.engines.torch.state.api import export_weights, inspect_checkpoint, load_checkpoint
from gpulab.errors import CheckpointError


def _tf_checkpoint(root, step):
    name = step_dir_name(step)
    tmp = root / f".tmp-{name}-1"
    tmp.mkdir(parents=True)
    (tmp / "ckpt.index").write_bytes(b"index" * 10)
    (tmp / "ckpt.data-00000-of-00001").write_bytes(bytes(range(256)) * 4)
    meta = meta_bytes(step, {}, {"epoch": 0, "metrics": {"loss": 0.5}})
    return commit_checkpoint(tmp, root, name, None, meta, layout=TF_LAYOUT, keep_last=2)


def test_a_tensorflow_checkpoint_is_committed_pruned_and_verified_like_torchs(tmp_path):
    for step in (1, 2, 3):
        final = _tf_checkpoint(tmp_path, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "step-00000002", "step-00000003"]
    assert (tmp_path / LATEST).read_text().strip() == "step-00000003"
    assert sorted(p.name for p in final.iterdir()) == [
        "MANIFEST.json",
        "ckpt.data-00000-of-00001",
        "ckpt.index",
        "meta.json",
    ]  # no state.pt: the engine's state is in its own files
    assert json.loads((final / "MANIFEST.json").read_text())["layout"] == "tensorflow"
    report = inspect_checkpoint(final)
    assert report["valid"] and report["step"] == 3, report["problems"]

    data = final / "ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert inspect_checkpoint(final)["problems"] == ["ckpt.data-00000-of-00001: mismatch"]


def test_torch_readers_name_a_tensorflow_checkpoint_in_one_line(tmp_path):
    final = _tf_checkpoint(tmp_path, 4)
    for call in (
        lambda: load_checkpoint(tmp_path),
        lambda: export_weights(final, tmp_path / "w.safetensors"),
    ):
        with pytest.raises(CheckpointError) as info:
            call()
        message = str(info.value)
        assert "written by the TensorFlow engine; resume it with --engine tensorflow" in message
        assert "\n" not in message


def test_checkpoint_export_asks_the_engine_that_wrote_it(tmp_path, capsys):
    """``gpulab checkpoint export`` reads the MANIFEST's layout and asks that engine for the weights: the
    TensorFlow engine says in one line where its weights are."""
    from gpulab.cli import main

    final = _tf_checkpoint(tmp_path, 5)
    assert main(["checkpoint", "export", str(final), "--to", str(tmp_path / "w.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"gpulab: error: {final} was written by the TensorFlow engine: its weights are the run's "
        "model.weights.h5 (checkpoint export copies a torch checkpoint's model.safetensors)"
    )
    assert not (tmp_path / "w.safetensors").exists()


def test_the_storage_package_imports_neither_tensorflow_nor_an_engine():
    """gpulab.checkpoint sits below both engines: importing every module of it loads no TensorFlow and no
    engine (gpulab.engine_registry, the registry config asks, loads none; one process: its own interpreter, as this
    session may hold them)."""
    code = (
        "import importlib, pkgutil, sys, gpulab.checkpoint as c\n"
        "names = [m.name for m in pkgutil.iter_modules(c.__path__, 'gpulab.checkpoint.')]\n"
        "[importlib.import_module(n) for n in names]\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'tensorflow' or m.startswith('gpulab.engines.')]\n"
        "print(len(names), bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, bad = out.stdout.split(" ", 1)
    # 6 modules: the torch-format api, FSDP2's shards, a torch state's checks and RNG state moved to
    # engines/torch/state/
    assert int(count) >= 6 and bad.strip() == "[]", out.stdout
