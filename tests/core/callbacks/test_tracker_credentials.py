"""A password in the MLflow tracking URI, through ``gpulab launch`` to a real ``mlflow server`` on loopback
and an offline W&B run: it is in no line printed (MLflow's own ``View run ... at:`` included), no file
under the run, W&B's directories or the job's captured output, and not in the rank's command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("mlflow")
pytest.importorskip("wandb")

HERE = Path(__file__).resolve().parent  # argv_recipe.py
PASSWORD = "pw-9c1e7b"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_password_in_the_tracking_uri_is_in_no_output_file_or_child_argv(
    tmp_path, mlflow_server, gpulab_server
):
    uri = mlflow_server.replace("http://", f"http://u:{PASSWORD}@")
    wandb_dirs = {f"WANDB_{k}_DIR": str(tmp_path / f"wandb-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")}
    env = dict.fromkeys(k for k in os.environ if k.startswith(("MLFLOW_", "WANDB_")))
    env |= {"WANDB_MODE": "offline", "WANDB_SILENT": "true", **wandb_dirs}
    argv = ["launch", "--nproc-per-node", "1", "--", "gpulab", "train", "argv_recipe:build", "--out", "run",
            "--max-steps", "2", "--set", "mfu=false", "--set", "trackers=[mlflow,wandb]",
            "--set", f"mlflow.tracking_uri={uri}", "--set", "mlflow.experiment=secret"]  # fmt: skip
    job = gpulab_server.start("gpulab.cli:main", argv, stderr=tmp_path / "job.log", env=env, cwd=tmp_path,
                              path=[str(HERE)])  # fmt: skip
    stdout, stderr = job.communicate(timeout=400)
    assert job.returncode == 0, stderr[-3000:]

    # MLflow printed its lines (to the job's stdout), with the password masked.
    assert "View run run at: http://u:***@127.0.0.1" in stdout, stdout[-2000:]
    assert "View experiment at: http://u:***@" in stdout
    assert "u:***@127.0.0.1" in stderr  # the launcher's echo of the command, masked
    # The rank's real command line: the URI masked (the rank got it through its environment).
    built = [f.read_text().splitlines() for f in tmp_path.glob("argv-*.txt")]  # the launcher's check too
    ranks = [argv for argv in built if argv[1:4] == ["-u", "-m", "gpulab"]]  # torchrun's worker
    assert len(ranks) == 1 and all(
        f"mlflow.tracking_uri={uri.replace(PASSWORD, '***')}" in argv for argv in ranks
    )
    # W&B recorded the program's arguments (masked) in the run it would upload.
    (wandb_run,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    assert f"mlflow.tracking_uri={uri.replace(PASSWORD, '***')}".encode() in wandb_run.read_bytes()

    held = [p for p in tmp_path.rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()]
    assert not held  # job.log and its stdout, the run, W&B's files and directories, the server's store
