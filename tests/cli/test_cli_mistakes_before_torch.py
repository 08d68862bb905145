"""A user's mistake in `gpulab train`'s arguments, paths or settings is told before torch (or TensorFlow)
is imported: one line, exit 2, nothing written, and the framework still not in ``sys.modules`` after.
(Importing torch took 2.1 s of the 5.8 s `--resume runs/nope/...` took to be refused on a quiet 2-core
machine, 160 s at load 20.) One fresh interpreter runs the mistakes in order and reports after each."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = ("torch", "tensorflow", "keras")

_PROBE = """
import contextlib, io, json, sys
from gpulab.cli import main
frameworks, commands = json.loads(sys.argv[1])
report = []
for argv in commands:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    loaded = sorted(m for m in frameworks if m in sys.modules)
    report.append({"argv": argv, "exit": code, "err": err.getvalue().splitlines(), "loaded": loaded})
print(json.dumps(report))
"""


def test_mistakes_in_arguments_paths_and_settings_are_told_without_importing_a_framework(tmp_path):
    out = str(tmp_path / "run")
    mistakes = {
        "--resume runs/nope/checkpoints/step-1": "runs/nope/checkpoints/step-1: no such checkpoint directory",
        "--set lrr=1": "unknown setting 'lrr'; valid settings: ",
        "--precision fp17": "setting 'precision' = 'fp17' is invalid",
        "--set options.samples=1": "setting 'options.samples' = 1 is invalid",
        "--engine tensorflow --set options.lr=-1": "setting 'options.lr' = -1 is invalid",
        "--max-steps 0 --set options.nope=2": "setting 'max_steps' = 0 is invalid",
    }
    commands = [["train", "mlp", "--out", out, *flags.split()] for flags in mistakes]
    commands.append(["train", "mlpp", "--out", out])
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([FRAMEWORKS, commands])],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    report = json.loads(proc.stdout)
    expected = [
        *mistakes.values(),
        "unknown recipe 'mlpp'; valid: mlp|digits|chargpt or your own module:function",
    ]
    for said, part in zip(report, expected, strict=True):
        assert said["exit"] == 2 and said["loaded"] == [], said
        assert said["err"][0].startswith("gpulab: error: ") and part in said["err"][0], said
    # Every mistake at once: the settings' and the recipe options'.
    assert len(report[-2]["err"]) == 2 and "'options.nope'" in report[-2]["err"][1]
    assert all(len(said["err"]) == 1 for said in report[:-2])
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
