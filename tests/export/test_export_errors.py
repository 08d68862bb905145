"""The mistakes a user will make with export/infer: one line each, exit 2 (parity failure: exit 1), and
nothing built or written before the check that refuses."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np

from gpulab.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err.strip()


def test_unknown_format_lists_the_valid_ones(digits_run, capsys):
    code, err = _run(capsys, "export", str(digits_run), "--format", "tfjs")
    assert code == 2 and err.count("\n") == 0
    assert "unknown export format 'tfjs'; valid: exported|onnx|torchscript|aoti|savedmodel|tflite" in err


def test_bad_batch_dim_and_precision(digits_run, capsys):
    code, err = _run(capsys, "export", str(digits_run), "--format", "onnx", "--batch-dim", "0")
    assert code == 2 and "valid: dynamic or a positive integer" in err
    code, err = _run(capsys, "export", str(digits_run), "--format", "onnx", "--precision", "int8")
    assert code == 2 and "valid: fp32|bf16|fp16" in err


def test_run_dir_without_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"recipe": "digits", "config": {"checkpoint_dir": None}}))
    code, err = _run(capsys, "export", str(run), "--format", "exported")
    assert code == 2 and "run directory with no checkpoint" in err and err.count("\n") == 0
    assert not (run / "export").exists()


def test_tampered_checkpoint_is_refused_before_anything_is_built(digits_run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(digits_run, copy, ignore=shutil.ignore_patterns("export"))
    step = next((copy / "checkpoints").glob("step-*"))
    # An older checkpoint that verifies: export must refuse `latest`, not quietly fall back to it.
    shutil.copytree(step, copy / "checkpoints" / "step-00000004")
    weights = step / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte in a weight: same size, different hash
    weights.write_bytes(bytes(data))
    code, err = _run(capsys, "export", str(copy), "--format", "exported")
    assert code == 2 and "sha256" in err.lower() and err.count("\n") == 0
    assert step.name in err
    assert not (copy / "export").exists()


def test_engine_format_mismatch(digits_run, tmp_path, capsys):
    code, err = _run(capsys, "export", str(digits_run), "--format", "savedmodel")
    assert code == 2
    assert "format savedmodel needs a TensorFlow-engine run" in err and "valid for it: exported|onnx" in err
    tf_run = tmp_path / "tf"
    tf_run.mkdir()
    (tf_run / "summary.json").write_text(json.dumps({"recipe": "digits", "engine": "tensorflow"}))
    code, err = _run(capsys, "export", str(tf_run), "--format", "onnx")
    assert code == 2 and "trained with the tensorflow engine; valid for it: savedmodel" in err
    code, err = _run(capsys, "export", str(tf_run), "--format", "savedmodel")
    assert code == 2 and "no model.weights.h5 (the TensorFlow engine writes it when a run ends)" in err


def test_missing_optional_package_names_the_pip_line(digits_run, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    code, err = _run(capsys, "export", str(digits_run), "--format", "onnx", "--out", "/nonexistent/x.onnx")
    assert code == 2 and err.count("\n") == 0
    assert "needs the Python package 'onnxruntime'" in err and "pip install 'gpulab[export]'" in err


def test_parity_failure_exits_1_with_the_figures(digits_run, tmp_path, monkeypatch, capsys):
    from gpulab.engines.torch.formats import exported

    real = exported.load
    monkeypatch.setattr(exported, "load", lambda path: lambda x, run=real(path): run(x) + 0.5)
    code = main(["export", str(digits_run), "--format", "exported", "--out", str(tmp_path / "m.pt2")])
    printed = capsys.readouterr()
    assert code == 1
    assert "parity FAILED on 360 samples: max abs error 0.5" in printed.err
    assert json.loads((tmp_path / "m.pt2.parity.json").read_text())["passed"] is False


def test_infer_errors(tmp_path, capsys):
    code, err = _run(capsys, "infer", str(tmp_path / "none.onnx"), "--recipe-data")
    assert code == 2 and "no such artifact" in err
    (tmp_path / "m.bin").write_bytes(b"x")
    code, err = _run(capsys, "infer", str(tmp_path / "m.bin"), "--recipe-data")
    assert code == 2 and "cannot tell its format" in err
    (tmp_path / "m.onnx").write_bytes(b"x")
    code, err = _run(capsys, "infer", str(tmp_path / "m.onnx"))
    assert code == 2 and "exactly one of --input FILE.npz|FILE.npy|DIR and --recipe-data" in err
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 1, 8, 8), dtype=np.float32))
    code, err = _run(capsys, "infer", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.npz"))
    assert code == 2 and "ONNX Runtime cannot load it" in err and err.count("\n") == 0
