"""A recipe whose module imports a library that is not installed: the fix is the pip install (gpulab's
extra where one holds it), not PYTHONPATH, which the recipe's module already is on (issue 40)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed")
def test_the_torchvision_example_without_torchvision_names_the_vision_extra(cli):
    code, err = cli("train", "examples.torchvision_resnet:build", "--max-steps", "1", cwd=ROOT)
    assert code == 2
    assert err.strip().splitlines() == [
        "gpulab: error: recipe 'examples.torchvision_resnet:build': module 'examples.torchvision_resnet' needs "
        "torchvision, which is not installed; fix: pip install 'gpulab[vision]'"
    ]


def test_a_library_no_extra_holds_is_named_with_its_module(cli, tmp_path):
    (tmp_path / "needs_lib.py").write_text(
        "import gpulab_no_such_library.sub\n\ndef build(options):\n    pass\n"
    )
    code, err = cli("train", "needs_lib:build", "--max-steps", "1", cwd=tmp_path)
    assert code == 2
    assert "needs gpulab_no_such_library, which is not installed; fix: pip install the package" in err
    assert "PYTHONPATH" not in err


def test_a_recipe_module_not_found_still_names_the_path(cli, tmp_path):
    code, err = cli("train", "not_here_at_all:build", "--max-steps", "1", cwd=tmp_path)
    assert code == 2 and "PYTHONPATH" in err
