"""Trackers after a stop, with a real ``gpulab train`` process stopped as schedulers stop it.

- SIGTERM to the run and to every child it has (what SLURM's scancel does under proctrack/linuxproc): W&B's
  helper is not among them, so the run ends with gpulab's stop line, MLflow says KILLED and W&B has every
  row up to the checkpoint.
- SIGKILL between checkpoints: the trackers lack what they had not yet written; the resume sends them that
  once, so that MLflow's, TensorBoard's and W&B's histories each equal metrics.jsonl: no hole, no duplicate.

Each run is a process forked from a server that imported torch, gpulab and W&B once (tests/forked.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from forked import Child, Forker

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

from tracker_history import assert_equal_to_jsonl, histories, jsonl, mlflow_status  # noqa: E402

CLI_TESTS = Path(__file__).resolve().parents[2] / "cli"  # preempt_recipe.py: a pause in each step
ALL = "trackers=[wandb,mlflow,tensorboard]"


def env(uri: str) -> dict[str, str | None]:
    """Over the fork server's environment: this test's trackers only (None unsets)."""
    unset = dict.fromkeys(k for k in os.environ if k.startswith(("MLFLOW_", "WANDB_")))
    return unset | {"MLFLOW_TRACKING_URI": uri, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def command(max_steps: int, *more: str) -> list[str]:
    return ["train", "preempt_recipe:build", "--out", "run", "--max-steps", str(max_steps), "--set", "mfu=false",
            "--set", ALL, "--set", "tensorboard=true", *more]  # fmt: skip


def start(server: Forker, args: list[str], cwd: Path, uri: str, name: str = "run") -> Child:
    """``gpulab ARGS`` in a process of its own (forked: tests/conftest.py's gpulab_server), in a session of
    its own, MLflow's store at URI. MLflow is imported by each run: its import starts a thread (pyarrow's
    jemalloc), after which no fork is safe."""
    stderr, path = cwd / f"{name}.stderr", [str(CLI_TESTS)]
    return server.start(
        "gpulab.cli:main", args, stderr=stderr, env=env(uri), cwd=cwd, session=True, path=path
    )


def finished(server: Forker, args: list[str], cwd: Path, uri: str) -> tuple[int, str]:
    proc = start(server, args, cwd, uri, name="resumed")
    _, stderr = proc.communicate(timeout=300)
    return proc.returncode, stderr


def wait_until(proc: Child, ready, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} in {timeout} s")
        time.sleep(0.02)


def steps_logged(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    text = path.read_text() if path.is_file() else ""
    return [json.loads(line)["step"] for line in text.splitlines() if line.endswith("}")]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (``pgrep -P``), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_sigterm_to_the_run_and_its_children_ends_with_the_stop_line_and_every_tracker_closed(
    tmp_path, gpulab_server
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = command(200, "--set", "options.pause=0.02")
    proc = start(gpulab_server, args, tmp_path, uri)
    wait_until(proc, lambda: len(steps_logged(tmp_path / "run")) >= 2, "logged step")
    for pid in [proc.pid, *children(proc.pid)]:  # kill -TERM $P $(pgrep -P $P)
        os.kill(pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)

    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert " SIGTERM at step " in stderr.strip().splitlines()[-1]
    assert mlflow_status(tmp_path / "run", uri) == "KILLED"
    wandb_rows = histories(tmp_path / "run", uri)["wandb"]
    assert wandb_rows and wandb_rows == jsonl(tmp_path / "run")  # every row up to the stop

    code, resumed_err = finished(gpulab_server, [*args, "--resume", "latest"], tmp_path, uri)
    assert code == 0, resumed_err
    assert mlflow_status(tmp_path / "run", uri) == "FINISHED"
    assert jsonl(tmp_path / "run")[-1][0] == 200
    assert_equal_to_jsonl(tmp_path / "run", uri)


@pytest.mark.slow
def test_after_sigkill_and_resume_every_tracker_history_equals_metrics_jsonl(tmp_path, gpulab_server):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "run"
    args = command(150, "--set", "checkpoint_every=20", "--set", "options.pause=0.01")
    proc = start(gpulab_server, args, tmp_path, uri)

    def past_a_checkpoint() -> bool:  # a checkpoint, and steps logged after it
        saved = [int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*")]
        return bool(saved) and max(steps_logged(out), default=0) > max(saved)

    wait_until(proc, past_a_checkpoint, "checkpoint followed by a logged step")
    proc.kill()
    proc.communicate()
    latest = int((out / "checkpoints" / "latest").read_text().strip().split("-")[1])
    before = histories(out, uri)
    kept = [s for s, _ in jsonl(out) if s <= latest]
    # The hole a kill leaves: TensorBoard flushes every two minutes, the others every few seconds.
    assert any(set(kept) - {s for s, _ in h} for h in before.values()), before

    code, resumed_err = finished(gpulab_server, [*args, "--resume", "latest"], tmp_path, uri)
    assert code == 0, resumed_err
    assert jsonl(out)[-1][0] == 150 and mlflow_status(out, uri) == "FINISHED"
    assert_equal_to_jsonl(out, uri)
