"""Pruning (no trial where an earlier one already decided it) and the time budget."""

from __future__ import annotations

import time

from gpulab.tune import search as search_module
from gpulab.tune.search import Search, pruned
from gpulab.tune.trial import Trial


def test_a_config_that_did_not_fit_prunes_larger_batches_and_compile_failures_prune_modes():
    oom = Trial(
        "batch_size=256", {"batch_size": 256, "precision": "fp32"}, "failed", "does not fit: out of memory"
    )
    assert "batch_size=256 did not fit" in pruned({"batch_size": 512, "precision": "fp32"}, [oom])
    assert "did not fit" in pruned({"batch_size": 256, "precision": "fp32", "compile": True}, [oom])
    assert pruned({"batch_size": 128, "precision": "fp32"}, [oom]) is None
    assert pruned({"batch_size": 512, "precision": "bf16-mixed"}, [oom]) is None  # less memory: try it
    broken = Trial("compile=default", {"compile": True}, "failed", "torch.compile fell back to eager")
    why = pruned({"compile": True, "compile_mode": "max-autotune"}, [broken])
    assert why.startswith("pruned: compile failed in compile=default")
    assert pruned({"compile": False}, [broken]) is None


def _noting_starts(real, what: str, starts: list):
    def started(*args, **kwargs):
        starts.append((what, kwargs.get("label", ""), time.monotonic()))
        return real(*args, **kwargs)

    return started


def test_the_search_stops_at_the_budget_with_the_best_so_far(monkeypatch):
    starts: list = []  # (trial or batch search, label, when it began)
    for name in ("run_trial", "largest_batch"):
        monkeypatch.setattr(search_module, name, _noting_starts(getattr(search_module, name), name, starts))
    user = {"recipe": "mlp", "options": {"samples": 1000}}
    search = Search(user, budget_s=1.0, steps=8, min_interval_s=0, log=lambda _: None)
    result = search.run()
    assert result.trials[0].label == "default" and result.default.status == "ok"  # always measured
    assert result.best.status == "ok" and result.best in result.trials
    assert result.out_of_budget
    assert any(s["reason"].startswith("budget:") for s in result.skipped)
    # The warm-up and the default trial always run whole; after them nothing starts once the budget is
    # spent. Checked on when things start, not on a total time: a loaded machine stretches what runs.
    assert [label for _, label, _ in starts[:2]] == ["warm-up", "default"]
    assert [(what, label) for what, label, when in starts[2:] if when > search.deadline] == []


def test_a_trial_past_the_deadline_stops_after_its_first_step_and_is_not_used():
    from gpulab.tune.trial import run_trial

    user = {"recipe": "mlp", "options": {"samples": 1000}}
    # On a clock of the test's own (no SIGALRM on it), the watch stops the fit at the first step's end.
    ticks = iter(range(10**6))
    trial = run_trial(user, {}, samples=640, deadline=0.0, label="x", clock=lambda: float(next(ticks)))
    assert trial.status == "stopped" and trial.samples_per_s is None
    assert trial.steps == 1 and "budget" in trial.reason
    # On the real clock SIGALRM stops it where it is, before a step ends (a long compile is one step).
    trial = run_trial(user, {}, samples=640, deadline=0.0, label="x")
    assert trial.status == "stopped" and trial.samples_per_s is None
    assert trial.steps == 0 and "budget" in trial.reason


def test_a_bad_budget_or_tolerance_is_one_line(capsys):
    from gpulab.cli import main

    assert main(["tune", "mlp", "--budget", "0"]) == 2
    assert main(["tune", "mlp", "--tolerance", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("gpulab: error: --budget must be a positive number of seconds")
    assert err[1].startswith("gpulab: error: --tolerance is a fraction")


def test_a_fast_step_gets_longer_trials_so_each_repeat_lasts_long_enough_to_time():
    from gpulab.tune.search import trial_samples

    assert trial_samples(30, 64, None) == 30 * 64  # no warm-up figure: the steps asked for
    assert trial_samples(30, 64, 640.0, 0.2) == 30 * 64  # 2 steps fill 0.2 s: 30 steps are plenty
    assert trial_samples(30, 64, 64_000.0, 0.2) == (1 + 6 * 200) * 64  # 200 steps per repeat
    # ... unless a trial would then outlast its share of the budget: at 1,000 steps/s, 7 intervals of
    # 100 steps fill 0.7 s
    assert trial_samples(30, 64, 64_000.0, 0.2, max_s=0.7) == (1 + 6 * 100) * 64


def test_a_slow_step_gets_shorter_trials_so_one_fits_its_share_of_the_budget():
    from gpulab.tune.search import trial_samples

    # digits on a loaded 2-core VM: 66 samples/s, one step a second; 30 steps would take 29 s of a 15 s share
    assert trial_samples(30, 64, 66.0, 0.2, max_s=15.0) == 15 * 64
    assert trial_samples(30, 64, 6.6, 0.2, max_s=15.0) == 7 * 64  # still a warm-up step and 6 repeats
