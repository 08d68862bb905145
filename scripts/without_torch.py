"""Run a gpulab command as if torch were not installed, and print where gpulab tried to import it.

    python scripts/without_torch.py train mlp --engine tensorflow --max-steps 2 --out /tmp/run
    python scripts/without_torch.py export /tmp/run --format savedmodel

Each attempt prints the last gpulab frames that led to it; the attempt then fails as it would in a venv
without torch (ModuleNotFoundError), so the command goes on as it would there: one line and exit 2 where
the verb needs torch, a normal run where the attempt was optional. The way to find a TensorFlow verb's
torch imports (docs/ARCHITECTURE.md, "Loading"); `make test-tf-only` is the real venv without torch.
"""

from __future__ import annotations

import runpy
import sys
import traceback


class HideTorch:
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] == "torch":
            frames = [f for f in traceback.extract_stack() if "/gpulab/" in f.filename]
            print(f"torch import attempt ({name}):", file=sys.stderr)
            for f in frames[-4:]:
                print(f"    {f.filename.split('/src/')[-1]}:{f.lineno}  {f.line}", file=sys.stderr)
            raise ModuleNotFoundError(f"No module named {name!r}", name="torch")


if __name__ == "__main__":
    sys.meta_path.insert(0, HideTorch())
    sys.argv = ["gpulab", *sys.argv[1:]]
    try:
        runpy.run_module("gpulab", run_name="__main__")
    finally:
        print(f"torch loaded: {'torch' in sys.modules}", file=sys.stderr)
