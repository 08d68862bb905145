"""AOTInductor: where a C++ compiler exists the package loads back (without the model's Python code) and
matches the eager model; where none exists the export is refused in one line before anything is built."""

from __future__ import annotations

import json

import pytest

from gpulab.cli import main
from gpulab.engines.torch.formats.aoti import compiler


def test_no_compiler_is_one_line(digits_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert main(["export", str(digits_run), "--format", "aoti", "--out", str(tmp_path / "m.pt2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "format aoti needs a C++ compiler" in err and err.count("\n") == 0
    assert not (tmp_path / "m.pt2").exists()


@pytest.mark.slow  # a C++ compile: about a minute on a busy 2-core CPU
@pytest.mark.skipif(compiler() is None, reason="no C++ compiler on this machine")
def test_aoti_package_matches_eager(tmp_path, monkeypatch):
    import torch._inductor.config as inductor_config

    from gpulab.engines.torch.train.run import run

    # The generated wrapper compiled at -O0 (kernels keep their own flags): the same check, a faster build.
    monkeypatch.setattr(inductor_config.aot_inductor, "compile_wrapper_opt_level", "O0")
    run({"recipe": "mlp", "out_dir": str(tmp_path / "mlp"), "max_steps": 2, "progress": False, "mfu": False,
         "tensorboard": False, "options": {"samples": 200}})  # fmt: skip
    out = tmp_path / "mlp.aoti.pt2"
    assert main(["export", str(tmp_path / "mlp"), "--format", "aoti", "--out", str(out)]) == 0
    report = json.loads((tmp_path / "mlp.aoti.pt2.parity.json").read_text())
    assert report["passed"] and report["samples"] == 40
    assert report["max_abs_error"] <= report["tolerance"]["atol"]


def test_aoti_out_must_end_in_pt2_before_anything_is_built(digits_run, tmp_path, capsys):
    assert main(["export", str(digits_run), "--format", "aoti", "--out", str(tmp_path / "m.so")]) == 2
    err = capsys.readouterr().err
    assert "format aoti needs a file name ending in .pt2" in err
