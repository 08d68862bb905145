"""A mistake only the launched ranks meet (a user recipe that raises where it runs, a file missing on one
node) under `gpulab launch --nproc-per-node 2 -- gpulab train`: its one line, said once by the launcher,
exit 2, after torchrun's lines (it was printed by each rank, then buried under torchrun's and the
launcher's failure lines, exit 1). A crash is still reported as torchrun reports it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RECIPE = """
import os

from gpulab.engines.torch.recipes.mlp import build as mlp


def build(options):
    launched = "WORLD_SIZE" in os.environ  # `gpulab launch` checks the recipe once before any rank starts
    if launched and os.environ["RANK"] in options.get("ranks", "").split(","):
        if options.get("crash"):
            os._exit(3)
        raise FileNotFoundError("/data/part-1.csv is missing on this node")
    return mlp({})
"""


def launched(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess:
    (tmp_path / "node_recipe.py").write_text(textwrap.dedent(RECIPE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    argv = ["launch", "--nproc-per-node", "2", "--", "gpulab", "train", "node_recipe:build", "--out", "run",
            "--max-steps", "2", "--set", "mfu=false", *settings]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gpulab", *argv], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=240)  # fmt: skip


@pytest.mark.distributed
@pytest.mark.parametrize("ranks", ["1", "0,1"], ids=["one-rank", "every-rank"])
def test_a_mistake_in_the_ranks_is_one_line_once_exit_2(tmp_path, ranks):
    proc = launched(tmp_path, "--set", f"options.ranks='{ranks}'")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("gpulab launch: 2 process(es)") and len(lines) == 2, proc.stderr
    assert lines[1] == (
        "gpulab: error: recipe 'node_recipe:build': build(options) raised FileNotFoundError: /data/part-1.csv "
        "is missing on this node (--debug shows the traceback)"
    )


@pytest.mark.distributed
def test_a_crash_in_the_ranks_is_still_torchruns_report_exit_1(tmp_path):
    proc = launched(tmp_path, "--set", "options.ranks='0,1'", "--set", "options.crash=true")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("gpulab: error: the job failed: rank 0 (local rank 0) exited with code 3"), last
    assert "failed (exitcode: 3)" in proc.stderr  # torchrun's own line, kept for a crash
