"""`gpulab infer`'s inputs checked against what the artifact declares, in one line; the arrays as .npz,
.npy or a directory of .npy files; and the loader chosen by the file and the user, never by the sidecar."""

from __future__ import annotations

import json
import warnings
import zipfile

import numpy as np
import pytest
import torch

from gpulab.cli import main
from gpulab.errors import GpulabWarning


@pytest.fixture(scope="module")
def artifacts(digits_run, tmp_path_factory):
    """The digits run exported as exported (.pt2) and torchscript; onnx where its extra is installed."""
    out = tmp_path_factory.mktemp("infer")
    found = {}
    for fmt, suffix in (("exported", ".pt2"), ("torchscript", ".torchscript.pt"), ("onnx", ".onnx")):
        if fmt == "onnx" and not _has("onnxruntime"):
            continue
        path = out / f"digits{suffix}"
        assert main(["export", str(digits_run), "--format", fmt, "--out", str(path)]) == 0
        found[fmt] = path
    return found


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _infer(capsys, *argv: str) -> tuple[int, list[str]]:
    """Exit code and the gpulab lines a user sees (warnings, which pytest catches, included)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["infer", *map(str, argv)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    said = [f"gpulab: warning: {w.message}" for w in caught if issubclass(w.category, GpulabWarning)]
    return code, said + [line for line in err.splitlines() if line.startswith("gpulab:")]


def _images(n: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(0).random((n, 1, 8, 8)).astype(dtype)


@pytest.mark.parametrize("fmt", ["exported", "torchscript", "onnx"])
def test_a_wrong_shape_is_one_line_naming_expected_and_given(artifacts, tmp_path, capsys, fmt):
    if fmt not in artifacts:
        pytest.skip("onnx extra not installed")
    np.save(tmp_path / "x.npy", np.zeros((5, 8, 8), dtype=np.float32))
    code, said = _infer(capsys, artifacts[fmt], "--input", tmp_path / "x.npy")
    assert code == 2 and len(said) == 1
    # the input's name quoted: a model whose input is called "input" read "input input float32 [...]"
    assert "x.npy: input 'input': float32 [batch, 1, 8, 8] expected, float32 [5, 8, 8] given" in said[0]


def test_an_array_named_otherwise_goes_in_order_and_is_said_and_unnamed_ones_silently(
    artifacts, tmp_path, capsys
):
    # the digits export's input is named by position ("input"): an array named otherwise was taken silently
    np.savez(tmp_path / "named.npz", pixels=_images(4))
    code, said = _infer(
        capsys, artifacts["exported"], "--input", tmp_path / "named.npz", "--out", tmp_path / "a.npz"
    )
    assert code == 0 and said == [
        f"gpulab: warning: {tmp_path / 'named.npz'}: fed array 'pixels' as input 'input' (the artifact's "
        "inputs are named by position)"
    ]
    np.savez(tmp_path / "unnamed.npz", _images(4))  # np.savez(FILE, array): arr_0, in order, as asked
    out = tmp_path / "b.npz"
    assert _infer(capsys, artifacts["exported"], "--input", tmp_path / "unnamed.npz", "--out", out) == (0, [])
    assert np.array_equal(np.load(out)["output"], np.load(tmp_path / "a.npz")["output"])


def test_an_export_says_which_input_a_wrongly_named_array_became(digits_run, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", pixels=_images(4))
    out = tmp_path / "d.pt2"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["export", str(digits_run), "--format", "exported", "--input", str(tmp_path / "in.npz"),
                     "--out", str(out)])  # fmt: skip
    said = [str(w.message) for w in caught if issubclass(w.category, GpulabWarning)]
    assert code == 0 and "Traceback" not in capsys.readouterr().err
    assert [s for s in said if "fed array" in s] == [
        f"{tmp_path / 'in.npz'}: fed array 'pixels' as input 'input' (Sequential.forward(input) takes no "
        "argument of that name; passed by position)"
    ], said


@pytest.mark.parametrize("fmt", ["exported", "onnx"])
def test_float64_is_cast_and_said_in_one_line(artifacts, tmp_path, capsys, fmt):
    if fmt not in artifacts:
        pytest.skip("onnx extra not installed")
    np.savez(tmp_path / "x.npz", input=_images(6, np.float64))
    code, said = _infer(capsys, artifacts[fmt], "--input", tmp_path / "x.npz", "--out", tmp_path / "p64.npz")
    assert code == 0 and len(said) == 1 and "float64 -> float32" in said[0]
    np.savez(tmp_path / "y.npz", input=_images(6))
    assert _infer(capsys, artifacts[fmt], "--input", tmp_path / "y.npz", "--out", tmp_path / "p32.npz") == (
        0,
        [],
    )
    assert np.array_equal(np.load(tmp_path / "p64.npz")["output"], np.load(tmp_path / "p32.npz")["output"])


def test_npy_and_a_directory_of_arrays_are_accepted_like_an_npz(artifacts, tmp_path, capsys):
    images = _images(7)
    np.savez(tmp_path / "x.npz", input=images)
    np.save(tmp_path / "x.npy", images)
    (tmp_path / "dir").mkdir()
    np.save(tmp_path / "dir" / "input.npy", images)
    outputs = []
    for given in ("x.npz", "x.npy", "dir"):
        out = tmp_path / f"{given}.pred.npz"
        assert _infer(capsys, artifacts["exported"], "--input", tmp_path / given, "--out", out) == (0, [])
        outputs.append(np.load(out)["output"])
    assert all(np.array_equal(outputs[0], o) for o in outputs[1:]) and outputs[0].shape[0] == 7


def test_the_sidecar_never_chooses_a_loader_that_runs_native_code(artifacts, tmp_path, capsys, monkeypatch):
    called = []
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda *a, **k: called.append(a))
    artifact = artifacts["exported"]
    sidecar = artifact.with_name(artifact.name + ".export.json")
    planted = tmp_path / artifact.name
    planted.write_bytes(artifact.read_bytes())
    planted.with_name(planted.name + ".export.json").write_text(
        json.dumps({**json.loads(sidecar.read_text()), "format": "aoti"})
    )
    np.savez(tmp_path / "x.npz", input=_images(3))
    assert _infer(capsys, planted, "--input", tmp_path / "x.npz")[0] == 0  # loaded as what it is
    assert called == []
    # A package that carries a shared library runs only with the user's --format aoti.
    with zipfile.ZipFile(tmp_path / "m.pt2", "w") as archive:
        archive.writestr("m/data/aotinductor/model/model.so", b"\x7fELF")
    code, said = _infer(capsys, tmp_path / "m.pt2", "--input", tmp_path / "x.npz")
    assert code == 2 and len(said) == 1 and "pass --format aoti" in said[0] and called == []
    code, said = _infer(capsys, tmp_path / "m.pt2", "--input", tmp_path / "x.npz", "--format", "exported")
    assert code == 2 and "holds compiled native code" in said[0] and called == []
    (tmp_path / "m.aoti.pt2").write_bytes(artifact.read_bytes())  # the name alone is no consent either
    code, said = _infer(capsys, tmp_path / "m.aoti.pt2", "--input", tmp_path / "x.npz")
    assert code == 2 and "pass --format aoti" in said[0] and called == []


def test_an_input_onnx_runtime_refuses_is_not_printed_by_onnx_runtime_too(tmp_path, capfd):
    # A token id past the vocabulary: ORT's own red log line came before gpulab's one line.
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from gpulab.engines.torch.formats.onnx import session

    table = helper.make_tensor("table", TensorProto.FLOAT, [3, 2], [0.0] * 6)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"])],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 2])],
        [table],
    )
    path = tmp_path / "lookup.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    sess = session(path)
    with pytest.raises(Exception, match="out of data bounds|out of bounds"):
        sess.run(None, {"ids": np.array([5], dtype=np.int64)})
    assert capfd.readouterr().err == ""
