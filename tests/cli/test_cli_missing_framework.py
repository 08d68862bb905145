"""A verb whose engine's framework is not installed (it is an extra: gpulab[torch], gpulab[tensorflow]) says
in one line which extra to install, exit 2, no traceback. The framework is hidden from a fresh interpreter
by an import hook, as a venv without it has it."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name={module!r})

sys.meta_path.insert(0, Hide())
from gpulab.cli import main
sys.exit(main({argv!r}))
"""


def _run(module: str, argv: list[str], cwd) -> subprocess.CompletedProcess:
    code = HIDE.format(module=module, argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_torch_verb_without_torch_names_the_extra(tmp_path):
    proc = _run("torch", ["train", "mlp", "--max-steps", "1", "--out", "run"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "gpulab: error: PyTorch is not installed and this command needs it (the torch engine); "
        "fix: pip install 'gpulab[torch]', or use --engine tensorflow"
    ]


@pytest.mark.parametrize("verb", [["train", "mlp", "--out", "run"], ["inspect", "mlp"]])
def test_a_tensorflow_verb_without_tensorflow_names_the_extra(tmp_path, verb):
    proc = _run("tensorflow", [*verb, "--engine", "tensorflow"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "pip install 'gpulab[tensorflow]'" in proc.stderr
