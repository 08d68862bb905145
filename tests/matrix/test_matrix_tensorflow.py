"""The matrix lane's TensorFlow cells (tests/matrix/setups.py): trained, inspected and served by their verb in
one process (tf_scenario.py: TensorFlow's import costs 5-10 s, paid once). A resume cell then runs in
processes of its own: an uninterrupted run, and a run killed with kill -9 after a checkpoint and resumed with
``--resume latest``, which must end on the uninterrupted run's weights and logged figures; each exits within
30 s of its end."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from lane import (
    HERE,
    STEPS,
    Verdict,
    ends_after_summary,
    judged,
    logged,
    params,
    train_argv,
    wait_for,
)
from setups import cells

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="no TensorFlow")
CELLS = [c for c in cells() if c["engine"] == "tensorflow"]


@pytest.fixture(scope="module")
def scenario_result(tmp_path_factory, scenario) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("tf")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return root, scenario(HERE / "tf_scenario.py", root, *(c.id for c in CELLS), env=env, timeout=600)


def gpulab(where: Path, argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(where), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "gpulab", *argv], cwd=where, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


def same_weights(a: Path, b: Path) -> bool:
    import h5py
    import numpy as np

    def arrays(path: Path) -> dict:
        found = {}
        with h5py.File(path) as f:
            f.visititems(
                lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        return found

    x, y = arrays(a), arrays(b)
    return x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)


def resume(cell, where: Path, verdict: Verdict) -> None:
    """A run killed (kill -9) after its first checkpoint, resumed to its end, against an uninterrupted run
    in a process of its own, as the killed one is."""
    every = ("--set", "checkpoint_every=1")  # the tiny model's 12 steps take well under a second
    straight = gpulab(where, train_argv(cell, "straight", *every))
    assert verdict.step("train (own process)", *ends_after_summary(straight, where / "straight", cell.id))
    proc = gpulab(where, train_argv(cell, "killed", *every))
    first = where / "killed" / "checkpoints" / "step-00000001"
    assert wait_for(first, proc), f"ended before its first checkpoint: {proc.communicate()[1][-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    # the newest step saved (a kill between a checkpoint's rename and its `latest` pointer leaves none)
    latest = max(int(p.name.split("-")[1]) for p in (where / "killed" / "checkpoints").glob("step-*"))
    assert latest < STEPS, f"killed at step {latest}, not before {STEPS}"
    resumed = gpulab(where, [*train_argv(cell, "killed", *every), "--resume", "latest"])
    code, err = ends_after_summary(resumed, where / "killed", f"{cell.id} resumed")
    if verdict.step("resume", code, err):
        assert same_weights(where / "straight" / "model.weights.h5", where / "killed" / "model.weights.h5")
        assert logged(where / "killed", latest) == logged(where / "straight", latest)


@pytest.mark.parametrize("cell", params(CELLS))
def test_cell_trains_to_its_end_and_serves_its_verb(cell, scenario_result):
    judged(cell, lambda: check(cell, *scenario_result))


def check(cell, root: Path, result: dict) -> None:
    got, verdict = result[cell.id], Verdict(cell)
    assert "crash" not in got, got.get("crash")
    for verb, code, err in got["steps"]:
        verdict.step(verb, code, err)
    bad = {k: v for k, v in got["errors"].items() if v > 1e-5}
    assert not bad, f"reloaded exports or infer differ from the eager model: {bad}"
    if cell["verb"] == "resume" and got["steps"][0][1] == 0:
        resume(cell, root / cell.id, verdict)
    verdict.write()
