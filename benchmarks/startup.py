"""How long a `gpulab` command takes to start: wall seconds of a fresh interpreter, median of N runs.

Times, interleaved so drift in machine load hits every command alike:
  python            `python -c pass`: the interpreter alone
  import torch      `python -c "import torch"`: what any torch-backed verb pays first
  --help            `gpulab --help`
  typo'd setting    `gpulab train mlp --set lrr=1` (a config error: exit 2, one line)
  doctor            `gpulab doctor --json`
The figure that matters is each command minus `import torch` (target: under 1 s).
Usage: python benchmarks/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python": ["-c", "pass"],
    "import torch": ["-c", "import torch"],
    "--help": ["-m", "gpulab", "--help"],
    "typo'd setting": ["-m", "gpulab", "train", "mlp", "--set", "lrr=1"],
    "doctor": ["-m", "gpulab", "doctor", "--json"],
}


def time_once(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(repeats):
        for name, args in COMMANDS.items():
            times[name].append(time_once(args))
    torch_s = statistics.median(times["import torch"])
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for name, samples in times.items():
        median = statistics.median(samples)
        extra = f"  (+{median - torch_s:.2f} s over import torch)" if median > torch_s else ""
        print(f"{name:16s} {median:6.2f} s  [{min(samples):.2f}-{max(samples):.2f}]{extra}")


if __name__ == "__main__":
    main()
