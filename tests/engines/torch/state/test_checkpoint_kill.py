"""SIGKILL a real process in the middle of a checkpoint save and check what survives.

The child saves step 1 normally, then saves step 2 with the test hook ``GPULAB_CHECKPOINT_PAUSE_AT`` set:
the saver writes the point's name to the signal file and sleeps there, and the test kills it.

What must hold at each point:

- ``after-weights``, ``before-rename``: step 2 exists only as ``.tmp-step-00000002-PID``; no
  ``step-00000002`` directory; ``latest`` and resolving it give step 1.
- ``before-latest``: the rename happened, so ``step-00000002`` is complete and verifies, but ``latest``
  was not moved: it, and resolving it, still give step 1 (``latest`` is the commit point).

In every case step 1 loads, and the next save removes the killed save's leftovers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import gpulab
from gpulab.engines.torch.state.api import (
    capture_rng,
    list_checkpoints,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)

CHILD = """
import os, sys, torch
from gpulab.engines.torch.state.api import capture_rng, save_checkpoint

root, point, signal_file = sys.argv[1:4]

def save(step):
    torch.manual_seed(step)
    model = torch.nn.Linear(64, 64)
    save_checkpoint(root, step=step, model_state=model.state_dict(),
                    state={"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}},
                    meta={"metrics": {"loss": 1.0 / step}})

save(1)
os.environ["GPULAB_CHECKPOINT_PAUSE_AT"] = point
os.environ["GPULAB_CHECKPOINT_PAUSE_SIGNAL"] = signal_file
save(2)
print("finished without pausing", flush=True)
"""


def _weights(step: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(step)
    return dict(torch.nn.Linear(64, 64).state_dict())


def _kill_while_saving(root: Path, point: str, signal_file: Path) -> int:
    """Run the child until it pauses at ``point``, SIGKILL it, and return its pid."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(gpulab.__file__).parents[1]), env.get("PYTHONPATH")])
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), point, str(signal_file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not signal_file.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                output = child.stdout.read().decode() if child.poll() is not None else "(still running)"
                pytest.fail(f"child never paused at {point}: {output}")
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()  # reaped: the pid is dead, so its temp dir counts as stale
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert signal_file.read_text() == point
    return child.pid


def _tmp_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp-"))


@pytest.mark.parametrize("point", ["after-weights", "before-rename", "before-latest"])
def test_sigkill_during_a_save_never_leaves_a_partial_checkpoint(tmp_path, point):
    root = tmp_path / "ck"
    pid = _kill_while_saving(root, point, tmp_path / "paused")
    step1, step2 = root / "step-00000001", root / "step-00000002"

    # latest is the commit point: it still names step 1 at every kill point
    assert (root / "latest").read_text().strip() == "step-00000001"
    assert resolve_checkpoint(root, "latest") == step1
    loaded = load_checkpoint(root)
    assert loaded.path == step1 and loaded.meta["step"] == 1
    for name, tensor in _weights(1).items():
        assert torch.equal(loaded.model_state[name], tensor)

    if point == "before-latest":
        assert _tmp_entries(root) == []
        assert list_checkpoints(root) == [step1, step2]  # complete and valid, just not committed
        step2_weights = load_checkpoint(step2).model_state
        assert all(torch.equal(step2_weights[k], v) for k, v in _weights(2).items())
    else:
        assert not step2.exists()
        assert _tmp_entries(root) == [f".tmp-step-00000002-{pid}"]
        leftover = {p.name for p in (root / f".tmp-step-00000002-{pid}").iterdir()}
        assert "model.safetensors" in leftover
        assert ("MANIFEST.json" in leftover) == (point == "before-rename")
        assert list_checkpoints(root) == [step1]

    # the next save cleans up after the killed one
    save_checkpoint(root, step=3, model_state=_weights(3), state={"rng": capture_rng()}, meta={})
    assert _tmp_entries(root) == []
    assert resolve_checkpoint(root) == root / "step-00000003"
    expected = [step1, step2] if point == "before-latest" else [step1]
    assert list_checkpoints(root) == [*expected, root / "step-00000003"]
