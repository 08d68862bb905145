"""The issue's multi-worker contract through the CLI: ``gpulab launch --engine tensorflow --nproc-per-node 2
-- gpulab train mlp --engine tensorflow --out DIR`` writes ONE run directory (the chief's files; worker 1
writes none, its checkpoint copy included) whose summary says world_size 2 and whose weights equal a 1-worker run at twice the batch.
The reference run starts beside the launch, so the three TensorFlow imports overlap."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.distributed,
    pytest.mark.slow,
]

TRAIN = ["gpulab", "train", "mlp", "--engine", "tensorflow", "--max-steps", "6"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    return {**env, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _weights(path) -> list[np.ndarray]:
    import h5py  # Keras's own dependency: present wherever TensorFlow is

    found: list[tuple[str, np.ndarray]] = []
    with h5py.File(path) as f:
        f.visititems(
            lambda name, obj: found.append((name, obj[()])) if isinstance(obj, h5py.Dataset) else None
        )
    return [array for _, array in sorted(found, key=lambda item: item[0])]


def test_two_workers_write_one_run_equal_to_one_worker_at_twice_the_batch(tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    ref = subprocess.Popen(
        [sys.executable, "-m", *TRAIN, "--batch-size", "32", "--out", str(one)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    launch = subprocess.run(
        [sys.executable, "-m", "gpulab", "launch", "--engine", "tensorflow", "--nproc-per-node", "2", "--"]
        + [*TRAIN, "--batch-size", "16", "--out", str(two)],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(),
    )
    ref_out, _ = ref.communicate(timeout=240)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert ref.returncode == 0, ref_out[-3000:]
    # The chief's files only: worker 1 wrote nothing (no second summary, metrics or weights file).
    assert sorted(p.name for p in two.iterdir()) == [
        "checkpoints",
        "metrics.jsonl",
        "model.weights.h5",
        "model.weights.manifest.json",
        "summary.json",
        "tensorboard",
    ]
    assert launch.stdout.count(f"wrote {two}/summary.json") == 1
    # Both workers wrote the checkpoint (a collective); the chief's copy was committed, worker 1's removed.
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["latest", "step-00000006"]
    summary = json.loads((two / "summary.json").read_text())
    assert (summary["world_size"], summary["strategy"], summary["engine"]) == (2, "multiworker", "tensorflow")
    reference = json.loads((one / "summary.json").read_text())
    assert (reference["world_size"], reference["strategy"]) == (1, "single")
    assert summary["steps"] == reference["steps"] == 6
    mine, theirs = _weights(two / "model.weights.h5"), _weights(one / "model.weights.h5")
    assert len(mine) == len(theirs) == 6
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # measured: max |diff| 3e-8
