"""``gpulab export --out`` replaces only an earlier artifact of its own: a user's folder, a run, its
checkpoints or a user's file at that path is one line, exit 2, and every byte of the tree is as it was.
Found by a new user (2026-11-28): ``--out RUN/checkpoints`` exited 0 with every checkpoint gone."""

from __future__ import annotations

import shutil

import pytest
from tree_hash import tree_hash

from gpulab.cli import main


@pytest.fixture
def run(digits_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(digits_run, copy)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    (tmp_path / "model.onnx").write_text("a user's file, not an export")
    return copy


@pytest.mark.parametrize(
    "target", ["run/checkpoints", "run", "mine", "model.onnx", "link.onnx"], ids=lambda t: t.replace("/", "-")
)
def test_export_onto_what_gpulab_did_not_write_is_refused_and_nothing_changes(run, target, capsys):
    root = run.parent
    (root / "link.onnx").symlink_to(root / "mine" / "notes.txt")
    before = tree_hash(root)
    code = main(["export", str(run), "--format", "onnx", "--out", str(root / target)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and "gpulab did not write" in err and "nothing was touched" in err, err
    assert tree_hash(root) == before


def test_an_earlier_export_of_the_same_format_is_replaced(run, capsys):
    out = run.parent / "digits.onnx"
    assert main(["export", str(run), "--format", "onnx", "--out", str(out)]) == 0
    first = out.read_bytes()
    capsys.readouterr()
    assert main(["export", str(run), "--format", "onnx", "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.read_bytes() == first  # the same weights, exported again in place
