"""Preemption as a scheduler or a person does it: SIGTERM / Ctrl-C sent to a real ``gpulab train`` process
mid-run. The first signal finishes the step, saves a checkpoint, names it in one line and exits 128 + N; the
resumed run ends with the weights of a run that was never interrupted; a second signal exits at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from run_waits import wait_for_a_logged_step
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
# mfu: false -- the MFU probe at fit start draws from the global random stream (issue 16 item 1, fixed
# separately); this test is about the signal, so it leaves MFU out of the comparison.
RUN = ["train", "preempt_recipe:build", "--max-steps", "200", "--set", "mfu=false"]


def env() -> dict[str, str]:
    # CUDA_VISIBLE_DEVICES empty: gloo ranks on the CPU, also on a machine with one GPU (NCCL would
    # refuse two ranks there).
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), e.get("PYTHONPATH")) if p)
    return {k: v for k, v in e.items() if not k.startswith(("TORCHELASTIC_", "PET_"))}


def gpulab(*args: str, cwd: Path, launch: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gpulab", *(["launch", *launch, "--", "gpulab"] if launch else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env(), timeout=240)


def start(*args: str, cwd: Path, launch: list[str] | None = None) -> subprocess.Popen:
    """In a session of its own, so that a test can signal its whole process group as a terminal does."""
    cmd = [sys.executable, "-m", "gpulab", *(["launch", *launch, "--", "gpulab"] if launch else []), *args]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen(cmd, cwd=cwd, env=env(), start_new_session=True, **pipes)


def wait_for_training(proc: subprocess.Popen, out: Path, timeout: float = 120) -> None:
    """Until the run has logged a step (it is inside the training loop)."""
    wait_for_a_logged_step(proc, out, timeout)


def losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def final_weights(out: Path) -> dict:
    latest = (out / "checkpoints" / "latest").read_text().strip()
    return load_file(out / "checkpoints" / latest / "model.safetensors")


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].equal(b[k]), k


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The run never stopped: one for every signal's comparison (each was its own 200-step process)."""
    where = tmp_path_factory.mktemp("uninterrupted")
    ref = gpulab(*RUN, "--out", "ref", cwd=where)
    assert ref.returncode == 0, ref.stderr
    return where / "ref"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_the_resumed_run_is_bit_exact(tmp_path, sig, uninterrupted):
    proc = start(*RUN, "--out", "run", cwd=tmp_path)
    wait_for_training(proc, tmp_path / "run")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"gpulab: stopped: {sig.name} at step ") and "--resume latest" in last
    step = int(last.split(" at step ")[1].split(":")[0])
    assert 5 <= step < 200
    assert (
        f"checkpoints/step-{step:08d}" in last
        and (tmp_path / "run" / "checkpoints" / f"step-{step:08d}").is_dir()
    )
    assert not (tmp_path / "run" / "summary.json").exists()  # an unfinished run has no summary

    resumed = gpulab(*RUN, "--out", "run", "--resume", "latest", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 200
    assert_same_weights(final_weights(tmp_path / "run"), final_weights(uninterrupted))
    # The logged losses too: the stop wrote no extra record, and the loss window was saved whole.
    ref_losses = losses(uninterrupted)
    run_losses = losses(tmp_path / "run")
    assert all(s % 5 == 0 for s in run_losses)  # log_every=5; no record at the stop step
    assert {s: v for s, v in run_losses.items() if s > step} == {
        s: v for s, v in ref_losses.items() if s > step
    }


def stderr_lines(proc: subprocess.Popen) -> tuple[list[str], threading.Thread]:
    """``proc``'s stderr lines as they come (a thread reads them), so a test can wait for one."""
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def wait_for_line(proc: subprocess.Popen, lines: list[str], part: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not any(part in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never printed {part!r}: {''.join(lines)[-2000:]}")
        time.sleep(0.02)


@pytest.mark.slow
def test_a_second_signal_exits_at_once_without_a_checkpoint(tmp_path):
    pause = 10  # seconds a step takes: the second signal lands inside the one the first signal finishes
    # the first step brisk, so it is logged at once; the signals then land in the second
    slow = [*RUN, "--set", f"options.pause={pause}", "--set", "options.brisk=1", "--set", "log_every=1"]
    proc = start(*slow, "--out", "run", cwd=tmp_path)
    wait_for_training(proc, tmp_path / "run")
    lines, reader = stderr_lines(proc)
    proc.send_signal(signal.SIGTERM)
    wait_for_line(proc, lines, "finishing this step")  # the first signal was handled: send the second
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    reader.join(timeout=60)
    stderr = "".join(lines)
    assert time.monotonic() - sent < pause / 2, stderr  # did not wait for the step to end
    assert proc.returncode == 143
    assert "second SIGTERM: stopping now, without a checkpoint" in stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any(
        p.name.startswith("step-") for p in (tmp_path / "run" / "checkpoints").iterdir()
    )


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_to_the_launcher_stops_both_gloo_ranks_at_one_step_and_resume_is_exact(tmp_path):
    """The launcher forwards SIGTERM to its workers, which reach it at different moments: they agree on
    the step (an all-reduced flag), save one checkpoint together and a 2-rank resume ends where an
    uninterrupted 2-rank run does."""
    two = ["--nproc-per-node", "2"]
    ref = gpulab(*RUN, "--out", "ref", cwd=tmp_path, launch=two)
    assert ref.returncode == 0, ref.stderr[-3000:]

    proc = start(*RUN, "--out", "run", cwd=tmp_path, launch=two)
    wait_for_training(proc, tmp_path / "run")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 143, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("gpulab: stopped: SIGTERM at step ")]
    assert len(stopped) == 1, stderr[-3000:]  # rank 0 reports, rank 1 stops quietly
    assert stderr.strip().splitlines()[-1] == (
        "gpulab: error: the launcher was stopped by SIGTERM and passed it on to its workers"
    )
    step = int(stopped[0].split(" at step ")[1].split(":")[0])
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == f"step-{step:08d}"

    resumed = gpulab(*RUN, "--out", "run", "--resume", "latest", cwd=tmp_path, launch=two)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_weights(final_weights(tmp_path / "run"), final_weights(tmp_path / "ref"))


@pytest.mark.distributed
def test_ctrl_c_under_launch_saves_a_checkpoint_on_both_ranks(tmp_path):
    """A terminal's Ctrl-C goes to the launcher's whole process group; the launcher forwards it to its
    workers (each in a session of its own, so they get it once): they save together and exit 130."""
    proc = start(*RUN, "--max-steps", "2000", "--out", "run", cwd=tmp_path, launch=["--nproc-per-node", "2"])
    wait_for_training(proc, tmp_path / "run")
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr[-3000:]
    assert "stopping now" not in stderr
    (stopped,) = [line for line in stderr.splitlines() if line.startswith("gpulab: stopped: SIGINT at step ")]
    step = int(stopped.split(" at step ")[1].split(":")[0])
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == f"step-{step:08d}"
