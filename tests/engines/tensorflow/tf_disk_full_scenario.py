"""Run in its own process by test_tf_disk_full.py (one TensorFlow import for three runs): a TensorFlow
checkpoint that fills a real tmpfs inside SaveV2, through the CLI in process. argv: a work directory and
the mounted tmpfs (resized here with ``mount -o remount``)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
from pathlib import Path

from gpulab.cli import main

PAGE = 4096
work, disk = Path(sys.argv[1]), Path(sys.argv[2])
root = disk / "ck"
quiet = ["--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"]
run = ["train", "mlp", "--engine", "tensorflow", "--set", "checkpoint_every=4", *quiet]


def resize(size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


def cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*run, *args])
    return code, err.getvalue()


assert cli("--out", str(work / "probe"), "--max-steps", "4")[0] == 0
step = work / "probe" / "checkpoints" / "step-00000004"
pages = {p.name: math.ceil(p.stat().st_size / PAGE) for p in step.iterdir()}
data = next(n for n in pages if n.startswith("ckpt.data-"))
# The step-4 checkpoint, the lock file and `latest`, and the next checkpoint less half of its data file.
resize((2 * sum(pages.values()) + 2 - pages[data] // 2) * PAGE)
failed = cli("--out", str(work / "run"), "--max-steps", "12", "--set", f"checkpoint_dir={root}")
left = sorted(p.name for p in root.iterdir())
resize(64 * 2**20)
resumed = cli(
    "--out", str(work / "run"), "--max-steps", "12", "--set", f"checkpoint_dir={root}", "--resume", "latest"
)
summary = json.loads((work / "run" / "summary.json").read_text()) if resumed[0] == 0 else {}
result = {"failed": failed, "left": left, "resumed": resumed, "steps": summary.get("steps"),
          "resumed_from": summary.get("resumed_from")}  # fmt: skip
print("RESULT " + json.dumps(result))
