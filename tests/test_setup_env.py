"""scripts/setup_env.sh (what `make run`/`make test` call) refuses a Python older than pyproject.toml's
requires-python in one line, before it makes anything: pip would refuse only after a venv of the old
Python exists, and a re-run with a newer PYTHON would then reuse that venv and fail again."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "setup_env.sh"
OLD = (
    Path.home() / ".pyenv" / "versions" / "3.9.18" / "bin" / "python"
)  # a real old interpreter, where one is


def _setup(venv: Path, python: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python}
    return subprocess.run(
        [str(SCRIPT), str(venv)], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT
    )


def test_the_script_checks_the_python_pyproject_requires():
    required = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert required and f"sys.version_info < ({required[1]}, {required[2]})" in SCRIPT.read_text()


@pytest.mark.skipif(not OLD.exists(), reason="needs a Python 3.9 interpreter (pyenv's 3.9.18)")
def test_an_old_python_is_one_line_before_anything_is_made(tmp_path):
    venv = tmp_path / "venv"
    proc = _setup(venv, str(OLD))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"setup: {OLD} is Python 3.9.18 and gpulab needs >= 3.10: run again with PYTHON=python3.10 (or newer) "
        "in the environment, e.g. PYTHON=python3.11 make run"
    ]
    assert not venv.exists()  # nothing for the re-run to trip over

    # A venv an older set-up left with the old Python: named, with the command that clears it.
    subprocess.run([str(OLD), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    proc = _setup(venv, "python3")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"setup: {venv} has Python 3.9.18 and gpulab needs >= 3.10: rm -rf {venv}, then run again with "
        "PYTHON=python3.10 (or newer) in the environment"
    )
