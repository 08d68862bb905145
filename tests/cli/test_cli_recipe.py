"""A user's own ``module:function`` recipe through the CLI: found in the working directory by the ``gpulab``
console script (as ``python -m`` finds it), and every way it can be wrong is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD_RECIPE = """
import torch
from torch import nn
from gpulab.train.recipes.base import Recipe

def build(options):
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    return Recipe(model=nn.Linear(3, 1), train_data=(x, x.sum(1, keepdim=True)),
                  loss_fn=nn.functional.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.01),
                  defaults={"batch_size": 8, "tensorboard": False, "mfu": False})
"""


def console_script() -> Path:
    script = Path(sys.executable).parent / "gpulab"
    if not script.is_file():
        pytest.skip("the gpulab console script is not installed beside this interpreter")
    return script


def run_gpulab(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed ``gpulab`` script (not ``python -m``), with the worktree's source but not cwd on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != "."
    )
    cmd = [sys.executable, str(console_script()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_console_script_finds_a_recipe_in_the_working_directory(tmp_path):
    (tmp_path / "my_recipe.py").write_text(textwrap.dedent(GOOD_RECIPE))
    proc = run_gpulab(
        tmp_path, "train", "my_recipe:build", "--out", "run", "--max-steps", "2", "--device", "cpu"
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_module_that_is_nowhere_names_the_places_looked(tmp_path):
    proc = run_gpulab(tmp_path, "train", "no_such_recipe:build", "--out", "run")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "cannot import module 'no_such_recipe'" in line
    assert f"current directory ({tmp_path})" in line and "PYTHONPATH" in line
