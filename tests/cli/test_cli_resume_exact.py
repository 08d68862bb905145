"""Exact resume through the CLI with its defaults (MFU on): a `gpulab train digits` run (dropout 0.25)
killed after its step-10 checkpoint and resumed ends with the same weights, byte for byte, as one never
stopped. Each process gets an empty peak cache, so the MFU peak is measured after the RNG was restored:
gpulab's own random data must come from a private generator, never the user's streams."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARGS = ("train", "digits", "--max-steps", "20", "--set", "checkpoint_every=10", "--set", "tensorboard=false")


def gpulab(out: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, **(env or {})}
    env["GPULAB_CACHE_DIR"] = str(out.parent / f"cache-{time.monotonic_ns()}")  # empty: peak measured
    return subprocess.Popen(
        [sys.executable, "-m", "gpulab", *ARGS, "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def final_weights(out: Path) -> bytes:
    return (out / "checkpoints" / "step-00000020" / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_killed_and_resumed_with_cli_defaults_is_byte_identical(tmp_path):
    straight = gpulab(tmp_path / "straight")
    _, err = straight.communicate(timeout=180)
    assert straight.returncode == 0, err

    signal_file = tmp_path / "paused"
    pause = {
        "GPULAB_CHECKPOINT_PAUSE_AT": "before-latest",
        "GPULAB_CHECKPOINT_PAUSE_SIGNAL": str(signal_file),
    }
    killed = gpulab(tmp_path / "resumed", env=pause)  # stops in its first save (step 10), after the rename
    deadline = time.time() + 180
    while not signal_file.exists():
        assert killed.poll() is None, killed.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    killed.kill()
    killed.communicate()
    assert (tmp_path / "resumed" / "checkpoints" / "step-00000010").is_dir()

    resumed = gpulab(tmp_path / "resumed", "--resume", "latest")
    _, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err
    assert final_weights(tmp_path / "resumed") == final_weights(tmp_path / "straight")
