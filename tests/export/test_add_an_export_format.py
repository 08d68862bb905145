"""docs/ARCHITECTURE.md's "How to add an export format", followed: a module for a format gpulab does not
ship (``layers_format.py``: a stack of layers as an .npz, run back by NumPy alone), registered with
``formats.register`` as a plugin would, and then the real CLI: ``gpulab export --format layers`` passes
parity on the validation set, the artifact reloads in a process that cannot import torch, ``gpulab infer``
reads it, and a TensorFlow run is refused in one line naming its own formats -- with no edit to the
export verb, infer or the parity check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import layers_format  # (tests/export is on the path)
import numpy as np
import pytest
import torch
from torch import nn

from gpulab import engine_registry as engines
from gpulab.artifact import formats
from gpulab.cli import main
from gpulab.engines.torch.formats.base import Deployable
from gpulab.engines.torch.recipes.digits import build as digits
from gpulab.errors import ConfigError


@pytest.fixture
def layers_registered(monkeypatch):
    """The format registered until the test ends (the torch engine's formats come back whole)."""
    export = engines.get("torch").export
    monkeypatch.setattr(export, "formats", dict(export.formats))
    formats.register(layers_format.NAME, layers_format.__name__)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_before_it_is_registered_the_format_is_unknown(digits_run, capsys):
    code, _, err = _cli(capsys, "export", str(digits_run), "--format", "layers")
    assert code == 2 and err.startswith("gpulab: error: unknown export format 'layers'; valid: exported|")


def test_a_registered_format_exports_reloads_without_torch_and_serves_infer(
    layers_registered, digits_run, tmp_path, capsys
):
    assert "layers" in formats.names() and formats.owner("layers").name == "torch"
    code, out, err = _cli(capsys, "export", str(digits_run), "--format", "layers")
    assert code == 0, err
    assert "parity ok on 360 samples" in out
    artifact = digits_run / "export" / "digits.layers.npz"
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert report["passed"] is True and report["format"] == "layers" and report["samples"] == 360
    assert report["runtime"] == "NumPy (layers_runtime.py)"
    assert report["accuracy_export"] == report["accuracy_eager"] and report["top1_agreement"] >= 0.999
    assert report["max_abs_error"] <= report["tolerance"]["atol"]
    sidecar = json.loads(artifact.with_name(artifact.name + ".export.json").read_text())
    assert sidecar["layers"] == [
        "conv2d",
        "relu",
        "conv2d",
        "relu",
        "maxpool2d",
        "flatten",
        "linear",
        "relu",
        "linear",
    ]

    # infer: the loader is told by the file's suffix, the predictions agree with parity's accuracy
    predictions = tmp_path / "val.npz"
    code, _, err = _cli(capsys, "infer", str(artifact), "--recipe-data", "--out", str(predictions))
    assert code == 0, err
    with np.load(predictions) as saved:
        top1, output = saved["top1"], saved["output"]
    inputs, labels = (t.numpy() for t in digits({}).val_data)  # the run's recipe, default options
    assert float((top1 == labels).mean()) == pytest.approx(report["accuracy_export"])

    # an independent reload: the runtime alone, in a process where torch cannot be imported
    np.save(tmp_path / "inputs.npy", inputs)
    again = _numpy_only_run(artifact, tmp_path / "inputs.npy", tmp_path / "again.npy")
    np.testing.assert_allclose(again, output, rtol=0, atol=1e-6)  # one batch of 360, not batches of 64
    assert (again.argmax(-1) == top1).all()


def test_its_fp16_artifact_holds_fp16_weights_and_passes_parity(
    layers_registered, digits_run, tmp_path, capsys
):
    artifact = tmp_path / "digits16.layers.npz"
    argv = ["export", str(digits_run), "--format", "layers", "--precision", "fp16", "--out", str(artifact)]
    code, _, err = _cli(capsys, *argv)
    assert code == 0, err
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert report["passed"] is True and report["precision"] == "fp16"
    with np.load(artifact) as saved:
        assert {saved[k].dtype for k in saved.files if k[0].isdigit()} == {np.dtype("float16")}


def test_a_tensorflow_run_is_refused_in_one_line_naming_its_formats(layers_registered, tmp_path, capsys):
    """The refusal reads which engine trained the run (its summary.json) before anything is built."""
    tf_run = tmp_path / "tf-run"
    tf_run.mkdir()
    (tf_run / "summary.json").write_text(json.dumps({"recipe": "digits", "engine": "tensorflow"}))
    code, _, err = _cli(capsys, "export", str(tf_run), "--format", "layers")
    assert code == 2 and err == (
        f"gpulab: error: format layers exports a torch model and {tf_run} was trained with the tensorflow "
        "engine; valid for it: savedmodel|tflite"
    )
    assert sorted(p.name for p in tf_run.iterdir()) == ["summary.json"]


def test_what_the_format_cannot_hold_is_one_line(layers_registered, digits_run, capsys):
    before = sorted((digits_run / "export").glob("*"))
    code, _, err = _cli(capsys, "export", str(digits_run), "--format", "layers", "--precision", "bf16")
    assert code == 2 and err == (
        "gpulab: error: format layers stores NumPy arrays, which have no bfloat16; use --precision fp32|fp16"
    )
    assert sorted((digits_run / "export").glob("*")) == before  # nothing written, nothing left behind
    lstm = Deployable(nn.Sequential(nn.LSTM(4, 4)))
    with pytest.raises(ConfigError, match=r"; this model has LSTM\(4, 4\); formats that can serve it: "):
        layers_format.write(lstm, (torch.zeros(2, 3, 4),), True, Path("unused.layers.npz"))


_NUMPY_ONLY = """
import sys
sys.modules["torch"] = None  # any import of torch fails
sys.path.insert(0, sys.argv[1])
import numpy as np, layers_runtime
np.save(sys.argv[4], layers_runtime.load(sys.argv[2])(np.load(sys.argv[3])))
"""


def _numpy_only_run(artifact: Path, inputs: Path, out: Path) -> np.ndarray:
    here = str(Path(__file__).parent)
    subprocess.run(
        [sys.executable, "-c", _NUMPY_ONLY, here, str(artifact), str(inputs), str(out)], check=True
    )
    return np.load(out)
