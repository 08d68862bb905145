"""``gpulab tune --budget 120`` keeps its budget on the search's own clock, and every ratio it prints is one
number. The clock is the test's: each read moves it on by a fixed step, so the trials (real fits of the
mlp recipe) cost clock time by the steps they run, whatever the machine's load; the budget then binds."""

from __future__ import annotations

import re

from rich.console import Console

from gpulab.tune.report import print_report, summary_lines
from gpulab.tune.search import Search, vs_default
from gpulab.tune.trial import BUDGET_RAN_OUT

BUDGET, TICK = 120.0, 0.5


class Ticks:
    """A clock that moves on by ``TICK`` seconds at every read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += TICK
        return self.now


def test_tune_finishes_inside_its_budget_and_its_table_and_text_give_one_ratio(tmp_path):
    clock = Ticks()
    user = {"recipe": "mlp", "options": {"samples": 4000}}
    result = Search(user, budget_s=BUDGET, steps=30, min_interval_s=0, log=lambda _: None, clock=clock).run()
    assert result.elapsed_s <= 1.1 * BUDGET and clock.now <= 1.1 * BUDGET  # +-10 %
    assert result.out_of_budget  # the budget bound: trials were stopped or skipped for it
    (said,) = [line for line in summary_lines(result) if line.startswith("budget: ")]
    cut = [t.label for t in result.trials if t.reason == BUDGET_RAN_OUT]
    cut += [s["value"] or s["knob"] for s in result.skipped if s["reason"].startswith("budget")]
    assert said.startswith(f"budget: 120 s left no time for {cut[0]}") and all(c in said for c in cut)
    assert all(t.wall_s <= 0.25 * BUDGET + 2 * TICK for t in result.trials[1:])  # no trial past its cap

    console = Console(record=True, width=250)
    print_report(console, result, tmp_path / "tuned.yaml", tmp_path / "tune.json")
    text = console.export_text()
    cells = [line.split("│") for line in text.splitlines() if re.match(r"│ +\d+ │", line)]
    assert [c[2].strip() for c in cells] == [t.label for t in result.trials]
    for cell, t in zip(cells, result.trials, strict=True):
        if t.samples_per_s is not None:
            assert cell[6].strip() == f"{vs_default(t, result)[0]:.2f}x"  # the table's column
    rows = {c[2].strip(): c[6].strip() for c in cells if "(again)" not in c[2]}  # each knob's trial once
    # Every "LABEL 0.97x the default" a sentence gives is that trial's figure in the table.
    sentences = text.split("└")[-1]
    said = re.findall(r"(\S+=\S+) (\d+\.\d\d)x the default", sentences)
    assert said, sentences
    for label, figure in said:
        assert rows[label] == f"{figure}x", (label, figure, rows)
    # The verdict's ratio is the table's figure for the trial it comes from (the re-measured pair's).
    verdict = next(line for line in sentences.splitlines() if line.startswith(("tuned ", "the defaults")))
    if result.best is not result.default or (result.reverted and result.reverted[1] is not None):
        assert f"{vs_default(result.compared[0], result)[0]:.2f}x" in verdict, verdict


def test_a_budget_with_time_for_the_default_only_says_it_measured_only_the_defaults():
    clock = Ticks()
    user = {"recipe": "mlp", "options": {"samples": 400}}
    result = Search(user, budget_s=5.0, steps=8, min_interval_s=0, log=lambda _: None, clock=clock).run()
    assert [t.label for t in result.trials] == ["default"] and result.best is result.default
    verdict = summary_lines(result)[0]
    assert verdict.startswith("measured only the defaults (default ") and "5 s budget (" in verdict
    assert "(precision=" in verdict or ": budget: " in verdict  # the budget's reason, not another skip's
    assert "fastest" not in verdict and verdict.endswith("give a larger --budget")


def test_a_trial_cut_by_its_cap_says_so_and_is_not_the_budget_running_out():
    clock = Ticks()
    search = Search({"recipe": "mlp"}, budget_s=100.0, min_interval_s=0, log=lambda _: None, clock=clock)
    search.samples = 64 * 400  # 400 steps: far more clock reads than the cap's 25 s of ticks
    trial = search._trial("long", {"batch_size": 64})
    assert trial.status == "stopped" and trial.reason == "stopped at the trial cap (25% of the budget, 25 s)"
    assert clock.now < search.deadline  # the budget itself had time left
    assert trial.reason != BUDGET_RAN_OUT


def test_a_start_up_that_spent_the_budget_is_said_with_its_share():
    # the command began 60 s of the test's clock before the search: its start-up spent the 40 s budget
    clock = Ticks()
    user = {"recipe": "mlp", "options": {"samples": 400}}
    search = Search(
        user, budget_s=40.0, steps=8, min_interval_s=0, log=lambda _: None, clock=clock, started=-60.0
    )
    result = search.run()
    assert [t.label for t in result.trials] == ["default"] and result.startup_s >= 60
    lines = summary_lines(result)
    (over,) = [line for line in lines if line.startswith("over budget before the search began")]
    assert f"the start-up took {result.startup_s:.0f} s" in over and over.endswith("give a larger --budget")
    assert any(line.startswith("budget: 40 s left no time for ") for line in lines)  # what was not measured
