"""digits, trained a few steps, exported to every format that needs no compiler; each artifact is loaded
back in its own runtime and its validation accuracy and top-1 predictions match the eager model's."""

from __future__ import annotations

import json
from contextlib import nullcontext

import numpy as np
import pytest

from gpulab.cli import main
from gpulab.errors import GpulabWarning

SUFFIX = {"exported": ".pt2", "onnx": ".onnx", "torchscript": ".torchscript.pt"}


@pytest.fixture(scope="module")
def onnx_export(digits_run):
    assert main(["export", str(digits_run), "--format", "onnx"]) == 0
    return digits_run / "export" / "digits.onnx"


def _assert_parity(artifact, fmt):
    report = json.loads(artifact.with_name(artifact.name + ".parity.json").read_text())
    assert report["passed"] is True and report["format"] == fmt
    assert report["samples"] == 360  # the whole validation split
    assert report["accuracy_export"] == report["accuracy_eager"]
    assert report["top1_agreement"] >= 0.999
    assert report["max_abs_error"] <= report["tolerance"]["atol"]
    return report


@pytest.mark.parametrize("fmt", ["exported", "torchscript"])
def test_digits_exports_with_equal_accuracy_and_top1(digits_run, fmt, capsys):
    deprecated = fmt == "torchscript"
    with pytest.warns(GpulabWarning, match="TorchScript is deprecated") if deprecated else nullcontext():
        assert main(["export", str(digits_run), "--format", fmt]) == 0
    assert "parity ok on 360 samples" in capsys.readouterr().out
    _assert_parity(digits_run / "export" / f"digits{SUFFIX[fmt]}", fmt)
    if fmt == "torchscript":  # scripting works on these models; trace is only the fallback
        info = json.loads((digits_run / "export" / "digits.torchscript.pt.export.json").read_text())
        assert info["method"] == "script"


def test_digits_onnx_opset_dynamic_batch_and_parity(onnx_export):
    import onnx

    _assert_parity(onnx_export, "onnx")
    info = json.loads(onnx_export.with_name("digits.onnx.export.json").read_text())
    assert info["opset"] == 18 and info["inputs"][0]["shape"] == ["batch", 1, 8, 8]
    model = onnx.load(str(onnx_export))
    assert model.opset_import[0].version == 18
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # a symbolic batch dimension


def test_infer_writes_predictions_that_match_the_parity_accuracy(onnx_export, tmp_path, capsys):
    report = json.loads(onnx_export.with_name("digits.onnx.parity.json").read_text())
    out = tmp_path / "val.npz"
    assert main(["infer", str(onnx_export), "--recipe-data", "--batch-size", "100", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "360 samples through ONNX Runtime" in line
    assert f"accuracy {report['accuracy_export']:.2%}" in line
    preds = np.load(out)
    assert preds["output"].shape == (360, 10) and preds["top1"].shape == (360,)
    # --input: an .npz of inputs without a target gives predictions and no accuracy
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).random((7, 1, 8, 8), dtype=np.float32))
    out = tmp_path / "p.npz"
    assert main(["infer", str(onnx_export), "--input", str(tmp_path / "in.npz"), "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "7 samples" in line and "accuracy" not in line
    assert np.load(out)["output"].shape == (7, 10)
    # --runtime cuda where this onnxruntime has no CUDA provider (the CPU wheel): one line, exit 2
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        assert main(["infer", str(onnx_export), "--recipe-data", "--runtime", "cuda"]) == 2
        assert "no CUDAExecutionProvider; fix: pip install onnxruntime-gpu" in capsys.readouterr().err


def test_a_checkpoint_directory_and_a_fixed_batch(digits_run, tmp_path):
    from gpulab.export.api import export
    from gpulab.export.infer import infer

    step = next(
        (digits_run / "checkpoints").glob("step-*")
    )  # a checkpoint, not its run: state.pt names the recipe
    result = export(step, "exported", batch_dim="50", out=tmp_path / "b50.pt2")
    assert result.info["recipe"] == "digits" and result.info["checkpoint"] == str(step)
    assert result.info["batch_dim"] == 50 and result.parity["passed"]  # 360 = 7 x 50 + a padded 10
    assert result.parity["samples"] == 360
    predicted = infer(result.artifact, recipe_data=True, batch_size=7)  # the artifact's own batch wins
    assert predicted.samples == 360 and predicted.accuracy == result.parity["accuracy_export"]


def test_a_checkpoints_folder_inside_a_run_exports_into_that_run(digits_run, capsys):
    # `gpulab export runs/x/checkpoints` wrote to ./export/ (the working directory), not runs/x/export/.
    from gpulab.artifact.run_record import checkpoint_root

    step = next((digits_run / "checkpoints").glob("step-*"))
    assert checkpoint_root(digits_run / "checkpoints") == (digits_run / "checkpoints", digits_run)
    assert checkpoint_root(step) == (step, digits_run)
    assert main(["export", str(digits_run / "checkpoints"), "--format", "exported"]) == 0
    assert f"{digits_run / 'export' / 'digits.pt2'}" in capsys.readouterr().out
