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
from gpulab.core.recipes.base import Recipe

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


WRONG = {
    "no-parameter": ("def build():\n    return None\n", "cannot be called with the options dict"),
    "two-parameters": ("def build(options, size):\n    return None\n", "missing a required argument: 'size'"),
    "not-a-function": ("build = 5\n", "is not a function (found int 5)"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_recipe_with_the_wrong_signature_is_one_line_naming_the_expected_one(
    tmp_path, monkeypatch, capfd, case
):
    from gpulab.cli import main

    source, expected = WRONG[case]
    (tmp_path / f"wrong_{case.replace('-', '_')}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["train", f"wrong_{case.replace('-', '_')}:build", "--out", "run"])
    err = capfd.readouterr().err
    assert code == 2, err
    (line,) = err.splitlines()
    assert expected in line and "expected def build(options: dict) -> gpulab.Recipe" in line
    assert "Traceback" not in err


FAILING = {
    "import-raises": (
        "raise ZeroDivisionError('division by zero')\n",
        "importing module",
        "ZeroDivisionError",
    ),
    "import-keyerror": ("{}['x']\n", "importing module", "KeyError: 'x'"),
    "build-raises": (
        "def build(options):\n    raise ValueError('no data here')\n",
        "build(options)",
        "ValueError: no data here",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(FAILING))
def test_a_recipe_that_raises_is_one_line_naming_recipe_and_exception(tmp_path, monkeypatch, capfd, case):
    from gpulab.cli import main

    source, where, what = FAILING[case]
    module = f"failing_{case.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["train", f"{module}:build", "--out", "run"])
    err = capfd.readouterr().err
    assert code == 2, err
    (line,) = err.splitlines()
    assert f"recipe '{module}:build'" in line and where in line and what in line and "--debug" in line
    sys.modules.pop(module, None)  # a failed import leaves nothing behind, but be sure for --debug below
    with pytest.raises(Exception, match="recipe") as info:
        main(["--debug", "train", f"{module}:build", "--out", "run"])
    assert info.value.__cause__ is not None  # --debug: the recipe's own traceback is chained


def test_options_that_are_not_a_mapping_are_one_line(tmp_path, monkeypatch, capfd):
    from gpulab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "mlp", "--set", "options=5", "--out", "run"]) == 2
    (line,) = capfd.readouterr().err.splitlines()
    assert "setting 'options' = 5 is invalid" in line and "--set options.lr=0.01" in line
