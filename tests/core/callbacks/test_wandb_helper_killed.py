"""The stop signal reaching W&B's helper too (SLURM with proctrack/cgroup signals every process of the job,
wandb-core among them, as the trial on the project's cluster showed): a real ``gpulab train`` and its
wandb-core are sent SIGTERM together. The helper dies before writing what it was handed; the run ends with
its stop line and one line saying where the lost rows are kept and how to send them (``wandb sync DIR``),
and a resume sends them itself: W&B's history then equals metrics.jsonl, step for step."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from test_tracker_stops import finished, start, steps_logged, wait_until

pytest.importorskip("wandb")
from wandb_log import read_run  # noqa: E402

ARGS = ["train", "preempt_recipe:build", "--out", "run", "--max-steps", "60", "--set", "mfu=false",
        "--set", "trackers=[wandb]", "--set", "options.pause=0.02"]  # fmt: skip


def wandb_core(run_pid: int) -> int | None:
    """The wandb-core gpulab started for run ``run_pid`` (outside its process tree)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"wandb-core") and str(run_pid).encode() in words:
            return int(cmdline.parent.name)
    return None


def steps_in(files: list[Path]) -> list[int]:
    return [row["_step"] for f in files for row in read_run(f)["history"] if "loss" in row]


@pytest.mark.slow
def test_rows_lost_with_wandbs_helper_are_kept_for_wandb_sync_and_sent_on_resume(tmp_path, gpulab_server):
    out, uri = tmp_path / "run", f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = start(gpulab_server, ARGS, tmp_path, uri)
    wait_until(proc, lambda: len(steps_logged(out)) >= 2 and wandb_core(proc.pid) is not None, "logged step")
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(wandb_core(proc.pid), signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)

    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "could not close its run" not in stderr and "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "wandb" in line]
    assert len(said) == 1 and said[0].startswith("gpulab: warning: wandb: its helper was stopped"), stderr
    kept = said[0].split("`wandb sync ")[1].rstrip("`")
    assert Path(tmp_path, kept).is_dir() and Path(kept).parts[:2] == ("run", "wandb-unsent")
    logged = steps_logged(out)
    # what the helper wrote before it died, and the rows kept for `wandb sync`: every logged row, once
    held = steps_in(sorted((out / "wandb").glob("offline-run-*/run-*.wandb")))
    assert sorted(held + steps_in(sorted(Path(tmp_path, kept).glob("run-*.wandb")))) == logged

    code, resumed = finished(gpulab_server, [*ARGS, "--resume", "latest"], tmp_path, uri)
    assert code == 0, resumed
    history = steps_in(sorted((out / "wandb").glob("offline-run-*/run-*.wandb")))
    assert history == steps_logged(out) == list(range(5, 65, 5))  # no hole, no duplicate
    assert not (out / "wandb-unsent").exists()  # sent: a later `wandb sync` of it would send them twice
