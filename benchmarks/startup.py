"""How long a `gpulab` command takes to start: wall seconds of a fresh interpreter, median of N runs, and each
as a ratio to `python -c "import torch"` (what any torch-backed verb pays first).

Times, interleaved so drift in machine load hits every command alike:
  python            `python -c pass`: the interpreter alone
  import torch      `python -c "import torch"`: the reference of every ratio
  torch + dynamo    `python -c "import torch, torch._dynamo"`: what any run with a torch.optim optimizer
                    imports (its constructor and its step import torch._dynamo, compile or not)
  torch 1 step      a hand-written step: a Linear, torch.optim.Adam, one backward and step (the floor of
                    any torch training script; gpulab's own cost is the 1-step run's time beyond it)
  --help            `gpulab --help`
  typo'd setting    `gpulab train mlp --set lrr=1` (a config error: exit 2, one line, no torch)
  missing resume    `gpulab train mlp --out OUT --resume runs/nope/checkpoints/step-1` (exit 2, no torch)
  doctor            `gpulab doctor --json`
  train 1 step      `gpulab train mlp --out OUT --max-steps 1 --overwrite` (a whole run: checkpoint, summary)
Targets (issue 40): a mistake under 1 s on a quiet 2-core machine; a 1-step run at most import torch + 1.5 s.
One untimed round comes first, and the commands run without PYTHONDONTWRITEBYTECODE: gpulab's modules load
from their cached bytecode, as an installed package's do (compiling them costs ~0.1 s a run).
--baseline SRC adds the 1-step run of the gpulab source tree SRC (say, `git archive main src` unpacked),
interleaved with the others: a before/after that shares the machine's load.
Usage: python benchmarks/startup.py [--repeats 7] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_TORCH_STEP = (
    "import torch; m = torch.nn.Linear(20, 1); o = torch.optim.Adam(m.parameters()); "
    "m(torch.randn(64, 20)).sum().backward(); o.step()"
)


def commands(out: Path) -> dict[str, list[str]]:
    gpulab = ["-m", "gpulab"]
    return {
        "python": ["-c", "pass"],
        "import torch": ["-c", "import torch"],
        "torch + dynamo": ["-c", "import torch, torch._dynamo"],
        "torch 1 step": ["-c", _TORCH_STEP],
        "--help": [*gpulab, "--help"],
        "typo'd setting": [*gpulab, "train", "mlp", "--set", "lrr=1"],
        "missing resume": [
            *gpulab,
            "train",
            "mlp",
            "--out",
            str(out),
            "--resume",
            "runs/nope/checkpoints/step-1",
        ],
        "doctor": [*gpulab, "doctor", "--json"],
        "train 1 step": [*gpulab, "train", "mlp", "--out", str(out), "--max-steps", "1", "--overwrite"],
    }


def time_once(args: list[str], cwd: Path, env: dict[str, str], src: str | None) -> float:
    if src is not None:  # the baseline's gpulab first on the path
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=False, cwd=cwd, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", help="a gpulab source tree (its src/) whose 1-step run is timed too")
    given = parser.parse_args()
    repeats = given.repeats
    with tempfile.TemporaryDirectory(prefix="gpulab-startup-") as tmp:
        cwd = Path(tmp)
        todo = {name: (args, None) for name, args in commands(cwd / "run").items()}
        if given.baseline:
            todo["train (baseline)"] = (todo["train 1 step"][0], str(Path(given.baseline).resolve()))
        times: dict[str, list[float]] = {name: [] for name in todo}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for args, src in todo.values():  # warm-up: bytecode written, files in the page cache
            time_once(args, cwd, env, src)
        loads = [os.getloadavg()[0]]
        for _ in range(repeats):
            for name, (args, src) in todo.items():
                times[name].append(time_once(args, cwd, env, src))
            loads.append(os.getloadavg()[0])
    torch_s = statistics.median(times["import torch"])
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {min(loads):.1f}-{max(loads):.1f}, median of {repeats}"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"{name:16s} {median:6.2f} s  [{min(samples):.2f}-{max(samples):.2f}]  "
            f"{median / torch_s:5.2f} x import torch  ({median - torch_s:+.2f} s)"
        )


if __name__ == "__main__":
    main()
