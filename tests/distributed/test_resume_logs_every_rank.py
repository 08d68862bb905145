"""After a multi-rank resume, every logged figure equals the uninterrupted run's, in metrics.jsonl and in
every tracker (issue 41). Two gloo ranks through ``gpulab launch``; the job is killed (kill -9, every
process, as a lost node) after the step-10 checkpoint and after logging steps 12 and 16, which the
trackers were handed (a pause of rank 0 before step 13 outlasts their hand-over interval) and MLflow
holds; then resumed with ``--resume latest``. Step 12's window (steps 9-12) began before the checkpoint:
before, every rank took back rank 0's unread losses, so the resumed run logged another step 12 than the
uninterrupted run's (which MLflow and W&B kept, metrics.jsonl and TensorBoard holding the new one)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "core" / "callbacks")]
from launch_job import job_env  # noqa: E402
from tracker_history import assert_equal_to_jsonl  # noqa: E402

STEPS, EVERY, LOG_EVERY, HOLD_AT = 24, 10, 4, 19
FIGURES = ("loss", "lr", "val_loss", "val_accuracy")  # every figure not a time (samples/s is one)


def start(server, out: Path, uri: str, *extra: str):
    """``gpulab launch --nproc-per-node 2 -- gpulab train ...`` in a session of its own, every tracker on."""
    env = job_env(PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env = {k: v for k, v in env.items() if not k.startswith(("MLFLOW_", "WANDB_"))}  # this test's only
    env |= {"MLFLOW_TRACKING_URI": uri, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = ["launch", "--nproc-per-node", "2", "--", "gpulab", "train", "held_recipe:build", "--out", str(out),
            "--max-steps", str(STEPS), "--set", f"checkpoint_every={EVERY}", "--set", f"log_every={LOG_EVERY}",
            "--set", "keep_last=null", "--set", "mfu=false", "--set", "trackers=[mlflow,wandb,tensorboard]",
            "--set", "tensorboard=true", "--set", f"mlflow.tracking_uri={uri}", *extra]  # fmt: skip
    name = f"{out.name}-{time.monotonic_ns()}"
    return server.start(
        "gpulab.cli:main", args, stderr=out.parent / f"{name}.stderr", environ=env, session=True
    )


def tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it, from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parents.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(
                int(stat.parent.name)
            )
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += parents.get(found[-1], [])
    return found


def finish(proc) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]


def figures(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{"step": r["step"], **{k: r[k] for k in FIGURES if k in r}} for r in rows]


def mlflow_steps(out: Path, uri: str) -> set[int]:
    ids = out / "trackers.json"
    if not ids.is_file():
        return set()
    run_id = json.loads(ids.read_text())["mlflow"]["run_id"]
    return {m.step for m in mlflow.MlflowClient(uri).get_metric_history(run_id, "loss")}


@pytest.mark.distributed
@pytest.mark.slow
def test_a_two_rank_run_killed_and_resumed_logs_the_uninterrupted_figures(tmp_path, gpulab_server):
    reference, out = tmp_path / "reference", tmp_path / "run"
    finish(start(gpulab_server, reference, f"sqlite:///{tmp_path / 'reference.db'}"))

    uri, held = f"sqlite:///{tmp_path / 'run.db'}", tmp_path / "held"
    proc = start(gpulab_server, out, uri, "--set", f"options.hold_file={held}", "--set", f"options.hold_at={HOLD_AT}",
                 "--set", "options.pause_at=13", "--set", "options.pause=5.5")  # fmt: skip
    deadline = time.monotonic() + 240
    while not (held.exists() and 12 in mlflow_steps(out, uri)):  # step 12 logged after checkpoint 10, kept
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    for pid in tree(proc.pid):  # the launcher, both ranks (each in a session of its own) and their helpers
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step-{EVERY:08d}"
    assert [r["step"] for r in figures(out) if "loss" in r] == [4, 8, 12, 16]  # logged past the checkpoint

    finish(start(gpulab_server, out, uri, "--resume", "latest"))
    assert figures(out) == figures(reference)  # every figure, bit for bit
    assert_equal_to_jsonl(out, uri)  # and each tracker's history holds the same
    final = f"checkpoints/step-{STEPS:08d}/model.safetensors"
    a, b = load_file(reference / final), load_file(out / final)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
