"""``trackers: [wandb]`` offline (``WANDB_MODE=offline``: no network): the run W&B writes under OUT/wandb is
read back from its own files, and a resumed run continues the same W&B run id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from wandb_log import read_run  # noqa: E402  (tests/core/callbacks is on the path)

from gpulab.engines.torch.train.run import run  # noqa: E402

CLI_TESTS = Path(__file__).resolve().parents[2] / "cli"  # preempt_recipe.py: no LR schedule


def offline_runs(out: Path) -> list[dict]:
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    return [read_run(f) for f in files]


def jsonl_losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


@pytest.mark.slow
def test_an_offline_wandb_run_holds_the_settings_and_losses_and_a_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.syspath_prepend(str(CLI_TESTS))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    user = {"recipe": "preempt_recipe:build", "out_dir": str(out), "device": "cpu", "progress": False,
            "mfu": False, "log_every": 5, "trackers": ["wandb"], "wandb": {"project": "tests"},
            "options": {"pause": 0.0}}  # fmt: skip
    _, done, _ = run({**user, "max_steps": 20})
    (first,) = offline_runs(out)
    # The run's figure as gpulab prints it, not W&B's last history value (one log interval's rate).
    assert first["summary"]["samples_per_s"] == pytest.approx(done.samples_per_s)
    assert first["summary"]["samples_per_s"] != pytest.approx(first["history"][-1]["samples_per_s"])
    assert (
        first["project"] == "tests"
        and first["run_id"] == json.loads((out / "trackers.json").read_text())["wandb"]["run_id"]
    )
    assert first["config"]["max_steps"] == 20 and first["config"]["options.pause"] == 0.0
    assert [(row["_step"], row["loss"]) for row in first["history"]] == sorted(jsonl_losses(out).items())

    _, result, _ = run({**user, "max_steps": 40, "resume": "latest"})
    runs = offline_runs(out)
    assert len(runs) == 2 and {r["run_id"] for r in runs} == {first["run_id"]}  # the same W&B run, continued
    resumed = next(r for r in runs if r["history"] and r["history"][0]["_step"] > 20)
    assert [row["_step"] for row in resumed["history"]] == [25, 30, 35, 40]
    history = [(row["_step"], row["loss"]) for r in runs for row in r["history"]]
    assert sorted(history) == sorted(jsonl_losses(out).items())
    assert resumed["summary"]["final_loss"] == pytest.approx(result.final_loss)
    assert not (tmp_path / "wandb").exists()  # everything under the run directory
