"""A command pays only for what it uses: `--help`, a config error and `doctor` import none of torch's
distributed checkpointing, dynamo or TensorBoard (together 2-3 s of start-up on a small machine)."""

from __future__ import annotations

import json
import subprocess
import sys

# Heavy modules a verb imports only when it needs them: sharded (FSDP2) checkpoints, DTensor and the
# sympy it pulls in, torch.compile, TensorBoard logging.
HEAVY = (
    "torch.distributed.checkpoint",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch._dynamo",
    "torch._inductor",
    "sympy",
    "tensorboard",
    "torch.utils.tensorboard",
)

# Runs each command in one fresh interpreter, in order, and reports after each which heavy modules are
# loaded by then (so the first command to import one is the one named).
_PROBE = """
import contextlib, io, json, sys
from gpulab.cli import main
heavy, commands = json.loads(sys.argv[1])
report = {}
for argv in commands:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    report[" ".join(argv)] = {"exit": code, "loaded": sorted(m for m in heavy if m in sys.modules)}
print(json.dumps(report))
"""


def test_help_config_error_and_doctor_import_no_heavy_module(tmp_path):
    commands = [
        ["--help"],
        ["train", "--help"],
        ["train", "mlp", "--set", "lrr=1", "--out", str(tmp_path / "run")],
        ["profile", "mlp", "--precision", "fp64"],
        ["doctor", "--json"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([HEAVY, commands])],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(proc.stdout)
    assert report["--help"]["exit"] == 0
    assert report[f"train mlp --set lrr=1 --out {tmp_path / 'run'}"]["exit"] == 2
    assert report["profile mlp --precision fp64"]["exit"] == 2
    assert {cmd: r["loaded"] for cmd, r in report.items() if r["loaded"]} == {}
    assert not (tmp_path / "run").exists()  # the error came before anything was written
