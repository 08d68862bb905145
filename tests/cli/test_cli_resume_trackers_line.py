"""The line a resume prints when the run logged to trackers this command does not name is gpulab's one
``gpulab: warning:`` line, not Python's ``file:line: UserWarning:`` format with its source line (issue 40)."""

from __future__ import annotations

import json
import subprocess
import sys

from gpulab.checkpoint.io import write_manifest

ARGS = ("train", "mlp", "--device", "cpu", "--set", "tensorboard=false", "--set", "options.samples=128")


def test_the_trackers_not_taken_line_is_one_gpulab_line(cli, tmp_path):
    out = tmp_path / "run"
    code, err = cli(*ARGS, "--out", out, "--max-steps", "2")
    assert code == 0, err
    for step in (out / "checkpoints").glob("step-*"):  # the first run had logged to W&B
        meta = json.loads((step / "meta.json").read_text())
        meta["config"]["trackers"] = ["wandb"]
        (step / "meta.json").write_text(json.dumps(meta))
        write_manifest(step)

    resumed = subprocess.run(
        [sys.executable, "-m", "gpulab", *ARGS, "--out", str(out), "--max-steps", "4", "--resume", "latest"],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    lines = [line for line in resumed.stderr.splitlines() if "trackers are not taken" in line]
    assert len(lines) == 1 and lines[0].startswith("gpulab: warning: resume: the run logged to wandb;"), lines
    assert "UserWarning" not in resumed.stderr and "say(" not in resumed.stderr
