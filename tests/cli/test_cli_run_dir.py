"""The run directory as two users (or one user twice) meet it: a second run into a busy ``--out`` is refused
in one line naming the holder; a lock left by a killed run is taken over. The holder is a real process
(killed for real); the run that meets it is this process's CLI entry point where its exit code and stderr
are all a test reads (no second interpreter, torch and torch._dynamo imported again, per check)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpulab.core.run_dir import LOCK_FILE

QUICK = ["--max-steps", "2", "--device", "cpu", "--set", "tensorboard=false", "--set", "mfu=false"]


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def start_long_run(out: Path, cwd: Path) -> subprocess.Popen:
    """A run that trains until it is killed; returns once it holds the lock (its pid is in the file)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--out", str(out), "--max-steps", "1000000",
         "--device", "cpu", "--set", "tensorboard=false", "--set", "mfu=false"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if json.loads((out / LOCK_FILE).read_text()).get("pid") == proc.pid:
                return proc
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            pytest.fail(f"the first run ended early: {proc.stderr.read()}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the first run never took the lock")


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _train(out: Path, *args: str) -> tuple[int, str]:
    """``gpulab train mlp`` in-process through the CLI entry point: (exit code, stderr)."""
    import contextlib
    import io

    from gpulab.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["train", "mlp", "--out", str(out), *QUICK, *args])
    return code, err.getvalue()


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_second_run_into_a_busy_out_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    first = start_long_run(out, tmp_path)
    try:
        code, err = _train(out)
        assert first.poll() is None  # the first run was not disturbed
    finally:
        first.send_signal(signal.SIGKILL)  # killed hard: its lock file stays behind
        first.wait()
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(f"gpulab: error: {out} is in use by another run")
    assert f"pid {first.pid} on host {socket.gethostname()}" in line and "another --out" in line
    assert not (out / "summary.json").exists()

    # The killed run's lock file is still there, naming a dead pid: the next run takes it over.
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == first.pid
    code, err = _train(out, "--overwrite")
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert not (out / LOCK_FILE).exists()  # released at the end


def test_a_stale_lock_file_of_a_dead_pid_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "since": "2020-01-01T00:00:00+00:00"}
    (out / LOCK_FILE).write_text(json.dumps(stale))
    code, err = _train(out)
    assert code == 0, err
    assert not (out / LOCK_FILE).exists()


@pytest.mark.distributed
def test_the_ranks_of_one_launch_do_not_refuse_each_other(tmp_path):
    """Under `gpulab launch` only rank 0 takes the lock: two ranks into one --out is one run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PET_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")  # two gloo ranks, also on a one-GPU machine
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "launch", "--nproc-per-node", "2", "--", "gpulab", "train", "mlp",
         "--out", str(out), *QUICK],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2
    assert not (out / LOCK_FILE).exists()


def test_a_directory_of_the_users_own_files_is_no_previous_run(tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert _train(out, "--max-steps", "2")[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.json").is_file()


def test_rerunning_into_a_used_out_is_refused_unless_resume_or_overwrite(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "--max-steps", "4", "--set", "checkpoint_every=1")[0] == 0
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)

    code, err = _train(out)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(
        f"gpulab: error: {out} already holds a run (checkpoints, metrics.jsonl, summary.json"
    )
    assert "--resume latest" in line and "--overwrite" in line
    assert _snapshot(out) == before  # nothing touched

    code, err = _train(out, "--overwrite", "--resume", "latest")  # the two contradict each other
    assert code == 2 and "--overwrite removes the checkpoints --resume latest" in err
    assert _snapshot(out) == before

    assert _train(out, "--max-steps", "6", "--resume", "latest")[0] == 0  # an explicit resume continues
    assert json.loads((out / "summary.json").read_text())["steps"] == 6

    # --overwrite: the old run's outputs are gone, only the new run's remain; a file of the user's stays.
    (out / "export").mkdir()  # what `gpulab export RUN` wrote of the old run (its default place)
    (out / "export" / "mlp.onnx").write_bytes(b"the old run's model")
    assert _train(out, "--max-steps", "2", "--set", "checkpoint_every=1", "--overwrite")[0] == 0
    assert not (out / "export").exists()  # no artifact of the old weights beside the new run
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest",
        "step-00000001",
        "step-00000002",
    ]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 2
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_overwrite_clears_checkpoints_kept_outside_out(tmp_path):
    out, elsewhere = tmp_path / "run", tmp_path / "ckpts"
    keep = ["--set", f"checkpoint_dir={elsewhere}", "--set", "checkpoint_every=1"]
    assert _train(out, "--max-steps", "4", *keep)[0] == 0
    (elsewhere / "README").write_text("not a checkpoint")
    assert _train(out, "--max-steps", "1", *keep, "--overwrite")[0] == 0
    assert sorted(p.name for p in elsewhere.iterdir()) == ["README", "latest", "step-00000001"]


def _paused_run(out: Path, cwd: Path, point: str, *args: str) -> tuple[subprocess.Popen, Path]:
    """``gpulab train mlp`` held at ``point`` of its first checkpoint save (the save's test hook); returns
    once it is there."""
    signal_file = cwd / f"paused-{out.name}"
    env = {**os.environ, "GPULAB_CHECKPOINT_PAUSE_AT": point, "GPULAB_CHECKPOINT_PAUSE_SIGNAL": str(signal_file),
           "GPULAB_CHECKPOINT_PAUSE_SECONDS": "300"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--out", str(out), *QUICK[2:], *args],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not signal_file.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its first checkpoint: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the run never reached its first checkpoint")
        time.sleep(0.05)
    return proc, signal_file


@pytest.mark.slow
def test_two_runs_sharing_a_checkpoint_dir_are_refused_naming_the_first(tmp_path):
    """Different --out, one checkpoint_dir: the second run used to replace and prune the first's
    checkpoints, both exiting 0. The checkpoint directory's own lock refuses it."""
    a, b, ck = tmp_path / "a", tmp_path / "b", tmp_path / "ck"
    shared = ["--max-steps", "300", "--set", "checkpoint_every=20", "--set", f"checkpoint_dir={ck}"]
    first, _ = _paused_run(a, tmp_path, "before-latest", "--seed", "1", *shared)
    try:
        before = _snapshot(ck)
        code, err = _train(b, "--seed", "2", *shared)  # its --max-steps overrides QUICK's
        assert first.poll() is None  # the first run was not disturbed
        assert _snapshot(ck) == before
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(
        f"gpulab: error: checkpoint directory {ck} is in use by another run (the run into {a}"
    )
    assert f"pid {first.pid} on host {socket.gethostname()}" in line and "another checkpoint_dir" in line
    assert not b.exists()  # refused before it wrote anything


def test_a_checkpoint_dir_inside_another_runs_out_is_locked_too(tmp_path):
    from gpulab.core.run_dir import claim
    from gpulab.errors import RunDirError

    a = tmp_path / "a"
    busy = rf"checkpoint directory {a / 'checkpoints'} is in use by another run \(the run into {a}, pid"
    # a run into a (checkpoints in a/checkpoints), then one into b with its checkpoint_dir there
    with (
        claim(a, 0),
        pytest.raises(RunDirError, match=busy),
        claim(tmp_path / "b", 0, str(a / "checkpoints")),
    ):
        pass
    assert not a.exists()  # both locks released; the directories they made, empty, are gone


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_is_started_again_by_resume_latest(tmp_path):
    """Killed inside its first save: the same command is refused offering --resume latest, which then
    starts the run again from step 0 saying so in one line (it used to fail: no complete checkpoint)."""
    out = tmp_path / "run"
    run = ["--max-steps", "6", "--set", "checkpoint_every=3"]
    first, _ = _paused_run(out, tmp_path, "after-weights", *run)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not (out / "checkpoints" / "latest").exists()

    code, err = _train(out, *run)
    assert code == 2
    (line,) = err.splitlines()
    assert "it stopped before its first checkpoint: start it again from step 0 with --resume latest" in line

    # A process of its own: its warning line is what stderr shows (pytest records warnings in this one).
    resumed = gpulab("train", "mlp", "--out", str(out), *QUICK[2:], *run, "--resume", "latest", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    (note,) = [ln for ln in resumed.stderr.splitlines() if ln.startswith("gpulab:")]
    assert note == (
        f"gpulab: warning: no checkpoint under {out / 'checkpoints'} yet (the run stopped before its first): "
        "starting from step 0"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and "resumed_from" not in summary
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)  # one run's records, in order
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "latest",
        "step-00000003",
        "step-00000006",
    ]


def test_resume_latest_where_no_run_ever_was_is_refused(tmp_path):
    code, err = _train(tmp_path / "typo", "--resume", "latest")
    assert code == 2
    assert err.strip() == (
        f"gpulab: error: --resume latest: {tmp_path / 'typo'} holds no run to continue (no checkpoint under "
        f"{tmp_path / 'typo' / 'checkpoints'}); drop --resume to start one, or give the --out (and "
        "checkpoint_dir) of the run"
    )


def test_a_device_this_machine_lacks_is_told_before_the_out_that_holds_a_run(tmp_path, monkeypatch, capsys):
    # After `make run`, runs/digits holds a run; the README's `gpulab train digits --device cuda` must name
    # the device (the mistake in the command), not the directory.
    import torch

    from gpulab.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    (tmp_path / "runs" / "digits").mkdir(parents=True)
    (tmp_path / "runs" / "digits" / "summary.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "digits", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "device 'cuda' requested but this machine has no cuda device" in err and "already holds" not in err
