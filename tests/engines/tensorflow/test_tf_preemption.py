"""Preemption on the TensorFlow engine, as on torch (tests/cli/test_cli_preemption.py): SIGTERM sent to a real
``gpulab train --engine tensorflow`` mid-run finishes the step, saves a checkpoint, names it in one line and
exits 143; the resumed run ends with the weights of a run that was never interrupted; a second signal
(here SIGINT, twice) exits 130 at once without a checkpoint. Before, the process died silently, unsaved."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from run_waits import wait_for_a_logged_step

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]

HERE = Path(__file__).resolve().parent
RUN = ["train", "tf_preempt_recipe:build", "--engine", "tensorflow", "--set", "options.pause=0.05"]


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    e.update(PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), e.get("PYTHONPATH")) if p)
    return e


def start(*args: str, cwd: Path, launch: list[str] | None = None) -> subprocess.Popen:
    """``gpulab [launch --engine tensorflow LAUNCH --] ARGS``, in a session of its own."""
    pre = ["launch", "--engine", "tensorflow", *launch, "--", "gpulab"] if launch else []
    return subprocess.Popen(
        [sys.executable, "-m", "gpulab", *pre, *args],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_training(proc: subprocess.Popen, out: Path, timeout: float = 300) -> None:
    """Until the run has logged a step (it is inside the training loop)."""
    wait_for_a_logged_step(proc, out, timeout, tail=3000)


def wait_for_line(proc: subprocess.Popen, start: str) -> str:
    """Stderr up to and including the first line that starts with START (the run has said it)."""
    seen = []
    while line := proc.stderr.readline():  # blocks until a line or the end (pytest-timeout bounds it)
        seen.append(line)
        if line.startswith(start):
            return "".join(seen)
    pytest.fail(f"the run ended before saying {start!r}: {''.join(seen)[-3000:]}")


def weights(path: Path) -> list[np.ndarray]:
    import h5py  # Keras's own dependency: present wherever TensorFlow is

    found: list[tuple[str, np.ndarray]] = []
    with h5py.File(path) as f:
        f.visititems(
            lambda name, obj: found.append((name, obj[()])) if isinstance(obj, h5py.Dataset) else None
        )
    return [array for _, array in sorted(found, key=lambda item: item[0])]


def stopped_step(stderr: str, sig: signal.Signals) -> int:
    (line,) = [x for x in stderr.splitlines() if x.startswith(f"gpulab: stopped: {sig.name} at step ")]
    assert "--resume latest" in line
    return int(line.split(" at step ")[1].split(":")[0])


def test_sigterm_saves_a_checkpoint_and_the_resumed_run_is_bit_exact(tmp_path):
    run = [*RUN, "--max-steps", "60"]
    ref = start(*run, "--out", "ref", cwd=tmp_path)  # beside the stopped run: the TensorFlow imports overlap
    proc = start(*run, "--out", "run", cwd=tmp_path)
    wait_for_training(proc, tmp_path / "run")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("gpulab: stopped: SIGTERM at step ")
    step = stopped_step(stderr, signal.SIGTERM)
    assert 5 <= step < 60
    assert f"run/checkpoints/step-{step:08d}" in stderr
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == f"step-{step:08d}"
    assert not (tmp_path / "run" / "summary.json").exists()  # an unfinished run has no summary

    resumed = start(*run, "--out", "run", "--resume", "latest", cwd=tmp_path)
    _, resumed_err = resumed.communicate(timeout=300)
    _, ref_err = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_err[-3000:]
    assert resumed.returncode == 0, resumed_err[-3000:]
    mine, theirs = (
        weights(tmp_path / "run" / "model.weights.h5"),
        weights(tmp_path / "ref" / "model.weights.h5"),
    )
    assert len(mine) == len(theirs) > 0
    for a, b in zip(mine, theirs, strict=True):
        assert np.array_equal(a, b)  # bit for bit, not allclose


def test_a_second_sigint_exits_130_at_once_without_a_checkpoint(tmp_path):
    slow = [*RUN, "--max-steps", "60", "--set", "options.pause=3", "--set", "log_every=1"]  # a 3 s step
    proc = start(*slow, "--out", "run", cwd=tmp_path)
    wait_for_training(proc, tmp_path / "run")
    proc.send_signal(signal.SIGINT)
    # The first is counted (its line is out), so the second lands inside the same 3 s step: no sleep.
    before = wait_for_line(proc, "gpulab: SIGINT: finishing this step")
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    stderr = before + rest
    assert proc.returncode == 130, stderr[-3000:]
    assert "gpulab: SIGINT: finishing this step" in stderr
    assert "second SIGINT: stopping now, without a checkpoint" in stderr
    checkpoints = tmp_path / "run" / "checkpoints"
    assert not checkpoints.exists() or not any(p.name.startswith("step-") for p in checkpoints.iterdir())


@pytest.mark.distributed
@pytest.mark.timeout(
    900
)  # three 2-worker launches (six TensorFlow starts): minutes on a loaded 2-core machine
def test_sigterm_to_the_launcher_stops_both_workers_at_one_step_and_resume_is_exact(tmp_path):
    """``gpulab launch --engine tensorflow`` forwards SIGTERM; its two workers get it at different moments,
    agree on the step (a flag summed in the step's all-reduce), save one checkpoint together and exit 143, so
    the launcher ends (it used to wait 30 s, then SIGKILL them: TensorFlow's multi-worker strategy swallows
    SIGTERM). A 2-worker resume ends with the weights of an uninterrupted 2-worker run."""
    two, run = ["--nproc-per-node", "2"], [*RUN, "--max-steps", "60"]
    ref = start(*run, "--out", "ref", cwd=tmp_path, launch=two)  # beside the stopped run: imports overlap
    proc = start(*run, "--out", "run", cwd=tmp_path, launch=two)
    wait_for_training(proc, tmp_path / "run")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=400)  # generous for a loaded machine; SIGKILL came at 30 s
    _, ref_err = ref.communicate(timeout=400)
    assert ref.returncode == 0, ref_err[-3000:]
    assert proc.returncode == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        "gpulab: error: the launcher was stopped by SIGTERM and passed it on to its workers"
    )
    step = stopped_step(stderr, signal.SIGTERM)  # one line: worker 0 reports, worker 1 stops quietly
    assert 5 <= step < 60
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == f"step-{step:08d}"

    resumed = start(*run, "--out", "run", "--resume", "latest", cwd=tmp_path, launch=two)
    _, resumed_err = resumed.communicate(timeout=400)
    assert resumed.returncode == 0, resumed_err[-3000:]
    mine, theirs = (
        weights(tmp_path / "run" / "model.weights.h5"),
        weights(tmp_path / "ref" / "model.weights.h5"),
    )
    assert len(mine) == len(theirs) > 0
    for a, b in zip(mine, theirs, strict=True):
        assert np.array_equal(a, b)
