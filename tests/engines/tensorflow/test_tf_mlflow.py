"""``trackers: [mlflow]`` on the TensorFlow engine: the same engine-neutral callback, in a real
``gpulab train --engine tensorflow`` process, read back from the SQLite store it wrote."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed"),
    pytest.mark.slow,
]


def test_a_tensorflow_run_logs_its_settings_losses_and_files_to_mlflow(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TF_CONFIG"))}
    done = subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--engine", "tensorflow", "--out", "run",
         "--max-steps", "12", "--set", "log_every=4", "--set", "trackers=[tensorboard,mlflow]",
         "--set", f"mlflow.tracking_uri={uri}", "--set", "mlflow.experiment=tf"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    client = mlflow.MlflowClient(uri)
    (found,) = client.search_runs([client.get_experiment_by_name("tf").experiment_id])
    assert found.info.status == "FINISHED"
    assert found.data.params["engine"] == "tensorflow" and found.data.params["max_steps"] == "12"
    assert found.data.tags["gpulab.engine"] == "tensorflow"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    history = sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, "loss"))
    assert history == [(r["step"], r["loss"]) for r in records if "loss" in r]
    assert [s for s, _ in history] == [4, 8, 12]
    artifacts = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert {"summary.json", "metrics.jsonl", "checkpoints"} <= artifacts
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))  # both trackers at once
