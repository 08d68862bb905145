"""Each tracker's loss history read back from its own store (W&B's offline files, TensorBoard's event files,
MLflow's metric history), to compare with ``metrics.jsonl``; shared by the tracker tests here and the
SLURM cluster (tests/distributed/test_slurm.py)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import mlflow
import pytest
from wandb_log import read_run


def jsonl(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def histories(out: Path, uri: str) -> dict[str, list[tuple[int, float]]]:
    """Each tracker's loss history, read back from its own store, in the order it was written."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    runs = [read_run(f) for f in sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))]
    events = [
        e
        for f in sorted((out / "tensorboard").glob("events.*"))
        for e in LegacyEventFileLoader(str(f)).Load()
    ]
    run_id = json.loads((out / "trackers.json").read_text())["mlflow"]["run_id"]
    history = mlflow.MlflowClient(uri).get_metric_history(run_id, "loss")
    return {
        "wandb": [(row["_step"], row["loss"]) for r in runs for row in r["history"] if "loss" in row],
        "tensorboard": [(e.step, v.simple_value) for e in events for v in e.summary.value if v.tag == "loss"],
        "mlflow": sorted((m.step, m.value) for m in history),  # MLflow keeps no order of writing
    }


def assert_equal_to_jsonl(out: Path, uri: str) -> None:
    expected = jsonl(out)
    for tracker, history in histories(out, uri).items():
        assert [s for s, _ in history] == [s for s, _ in expected], tracker  # each step once, in order
        assert [v for _, v in history] == pytest.approx([v for _, v in expected], rel=1e-6), tracker


def mlflow_status(out: Path, uri: str) -> str:
    run_id = json.loads((out / "trackers.json").read_text())["mlflow"]["run_id"]
    return mlflow.MlflowClient(uri).get_run(run_id).info.status
