"""`gpulab tune` end to end on the mlp recipe with a small budget: tuned.yaml is a config `gpulab train
--config` runs as is, tune.json holds every trial with its figures, and every skipped value its reason."""

from __future__ import annotations

import json
import time

import yaml

from gpulab.cli import main
from gpulab.config import RunConfig, parse_config
from gpulab.tune import search as search_module


def _note_starts(monkeypatch) -> tuple[list, list]:
    """(what, label, when) for each trial and batch search as it starts, and the Search objects that ran."""
    starts: list = []
    searches: list = []
    for name in ("run_trial", "largest_batch"):
        real = getattr(search_module, name)

        def started(*args, _real=real, _name=name, **kwargs):
            starts.append((_name, kwargs.get("label", ""), time.monotonic()))
            return _real(*args, **kwargs)

        monkeypatch.setattr(search_module, name, started)
    run = search_module.Search.run

    def noting_run(self):
        searches.append(self)
        return run(self)

    monkeypatch.setattr(search_module.Search, "run", noting_run)
    return starts, searches


def test_tune_writes_a_config_train_takes_and_every_trial(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    budget = 12
    starts, searches = _note_starts(monkeypatch)
    code = main(
        [
            "tune",
            "mlp",
            "--budget",
            str(budget),
            "--out",
            "t",
            "--steps",
            "8",
            "--set",
            "options.samples=1000",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "gpulab tune mlp on cpu" in printed and "wrote t/tuned.yaml" in printed

    doc = json.loads((tmp_path / "t" / "tune.json").read_text())
    # The budget is checked before and during every trial; the warm-up and the default trial always run
    # whole, then nothing starts once it is spent. Checked on when things start, not on the total time
    # (a loaded machine stretches what runs: 35 s seen at load 10 on 2 cores for a 12 s budget).
    (search,) = searches
    assert [label for _, label, _ in starts[:2]] == ["warm-up", "default"]
    assert [(what, label) for what, label, when in starts[2:] if when > search.deadline] == []
    assert doc["elapsed_s"] > 0
    default = doc["trials"][0]
    assert default["label"] == "default" and default["status"] == "ok"
    for trial in doc["trials"]:
        assert {"settings", "samples_per_s", "peak_memory_mib", "loss", "status", "reason"} <= set(trial)
        if trial["status"] == "ok":
            fig = trial["samples_per_s"]
            assert fig["low"] <= fig["value"] <= fig["high"] and fig["repeats"] >= 2
        else:
            assert trial["reason"]
    reasons = {s["knob"]: s["reason"] for s in doc["skipped"]}
    assert "fast path" in reasons["num_workers"]  # tensor data: no DataLoader to tune
    assert all(s["reason"] for s in doc["skipped"])
    if doc["reverted"] is None:  # else the final re-measure undid the pick: no speed-up to report
        assert doc["speedup"]["low"] <= doc["speedup"]["tuned_over_default"] <= doc["speedup"]["high"]
    else:  # measured None: no time was left to re-measure the pick, so it is not recommended either
        measured = doc["reverted"]["measured"]
        assert doc["speedup"] is None and (measured is None or measured < 1.03)
    assert len(doc["decisions"]) >= 6 and all(d["sentence"] for d in doc["decisions"])
    png = tmp_path / "t" / "tune.png"  # the trials' samples/s as bars (tests/tune/test_tune_plot.py)
    assert doc["plot"] == "t/tune.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    tuned = yaml.safe_load((tmp_path / "t" / "tuned.yaml").read_text())
    assert tuned["recipe"] == "mlp" and tuned["options"] == {"samples": 1000}
    parse_config(RunConfig, tuned)  # every key valid
    code = main(
        ["train", "--config", "t/tuned.yaml", "--out", "run", "--max-steps", "3", "--set", "progress=false"]
    )
    assert code == 0 and (tmp_path / "run" / "summary.json").is_file()
