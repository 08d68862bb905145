"""Run in its own process by test_tf_fit_in_one_process.py: ``gpulab train`` of repeat_fit_recipe.py, as
many times as asked, in this one process. Prints ``RESULT [...]``: each run's final weights, as a SHA-256
per array of its model.weights.h5 (in the file's order)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import h5py

from gpulab.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
out, times = Path(sys.argv[1]), int(sys.argv[2])


def weights(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}

    def note(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            found[name] = hashlib.sha256(obj[()].tobytes()).hexdigest()

    with h5py.File(path) as f:
        f.visititems(note)
    return found


runs = []
for i in range(times):
    where = out / f"run{i}"
    argv = ["train", "repeat_fit_recipe:build", "--engine", "tensorflow", "--out", str(where),
            "--max-steps", "12", "--set", "progress=false"]  # fmt: skip
    assert main(argv) == 0, f"run {i} failed"
    runs.append(weights(where / "model.weights.h5"))
print("RESULT " + json.dumps(runs))
