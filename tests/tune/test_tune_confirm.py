"""The final back-to-back re-measure: a pick that does not beat the default there is undone, so tuned.yaml
never holds a knob whose win did not survive a second look (noise on a shared machine)."""

from __future__ import annotations

from gpulab.measure.results import Figure
from gpulab.tune.report import summary_lines, tuned_settings
from gpulab.tune.search import Decision, Search, TuneResult
from gpulab.tune.trial import Trial


def _trial(label: str, settings: dict, rate: float) -> Trial:
    fig = Figure(rate, "samples/s", 5, rate * 0.97, rate * 1.03, "iqr", "higher")
    return Trial(label, settings, samples_per_s=fig, batch_size=64, loss=1.0, wall_s=0.1)


def _searched(again_default: float, again_tuned: float) -> tuple[TuneResult, Search]:
    default = _trial("default", {"prefetch_factor": None}, 1000.0)
    pick = _trial("prefetch_factor=1", {"prefetch_factor": 1}, 1300.0)
    decision = Decision(
        "prefetch_factor", {"prefetch_factor": 1}, True, "prefetch_factor: 1 over AUTOTUNE: 1.30x."
    )
    result = TuneResult("digits", "cpu", 60.0, 0.1, 640, default, pick, [default, pick], decisions=[decision])
    search = Search({"recipe": "digits"}, budget_s=60.0, log=lambda _: None)
    again = {"default (again)": again_default, "tuned (again)": again_tuned}
    search._trial = lambda label, settings, deadline=None: _trial(label, settings, again[label])
    search._confirm(result)
    return result, search


def test_a_pick_slower_back_to_back_at_the_end_is_undone_and_the_defaults_stand():
    result, _ = _searched(again_default=1000.0, again_tuned=990.0)
    assert result.best is result.default and result.reverted[0].label == "prefetch_factor=1"
    assert tuned_settings({"recipe": "digits"}, result) == {"recipe": "digits"}
    lines = summary_lines(result)
    assert lines[0].startswith("the defaults stand: the search's pick (prefetch_factor=1) measured 0.99x")
    assert "not kept: the tuned config measured 0.99x" in lines[1]


def test_a_pick_that_holds_back_to_back_is_kept_with_that_pairs_ratio():
    result, _ = _searched(again_default=1000.0, again_tuned=1250.0)
    assert result.reverted is None and result.best.label == "prefetch_factor=1"
    assert tuned_settings({"recipe": "digits"}, result) == {"recipe": "digits", "prefetch_factor": 1}
    assert round(result.ratio[0], 2) == 1.25 and "back to back" in result.ratio_from
