"""The divergence guard: a knob whose run diverges (here larger batches on a summed loss with SGD) is
rejected with the reason and never chosen, however fast it is; a NaN loss is rejected outright."""

from __future__ import annotations

import math
from pathlib import Path

from gpulab.tune.search import Search, guard
from gpulab.tune.trial import Trial

HERE = Path(__file__).parent


def test_diverging_batch_sizes_are_rejected_with_the_reason(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    result = Search(
        {"recipe": "diverge_recipe:build"}, budget_s=20, steps=16, min_interval_s=0, log=lambda _: None
    ).run()
    batches = {t.batch_size: t for t in result.trials if t.label.startswith("batch_size=")}
    assert 64 in batches, [t.label for t in result.trials]
    for b, trial in batches.items():
        if b >= 64:  # lr * 2b > 2: SGD overshoots and the loss grows
            assert trial.status == "rejected", (b, trial.status, trial.loss)
            assert "the default's" in trial.reason or "not finite" in trial.reason
    assert result.best.status == "ok" and (result.best.batch_size or 0) <= 32
    decision = next(d for d in result.decisions if d.knob == "batch_size")
    assert "rejected" in decision.sentence


def test_a_nan_loss_or_a_worse_one_is_rejected():
    default = Trial("default", {}, loss=0.50, samples=640)
    nan = Trial("precision=fp16-mixed", {}, loss=math.nan)
    worse = Trial("batch_size=512", {}, loss=0.60)
    close = Trial("batch_size=128", {}, loss=0.54)
    for trial in (nan, worse, close):
        guard(trial, default, tolerance=0.10)
    assert nan.status == "rejected" and "not finite" in nan.reason
    assert worse.status == "rejected" and "+20%" in worse.reason and "tolerance 10%" in worse.reason
    assert close.status == "ok"


def test_a_faster_median_inside_the_noise_does_not_win():
    from gpulab.measure.results import Figure
    from gpulab.tune.search import beats

    best = Trial("default", {}, samples_per_s=Figure(1000.0, "samples/s", 5, 900.0, 1100.0, "iqr", "higher"))
    noisy = Trial("a", {}, samples_per_s=Figure(1200.0, "samples/s", 5, 950.0, 1300.0, "iqr", "higher"))
    clear = Trial("b", {}, samples_per_s=Figure(1200.0, "samples/s", 5, 1050.0, 1300.0, "iqr", "higher"))
    marginal = Trial("c", {}, samples_per_s=Figure(1020.0, "samples/s", 5, 1010.0, 1030.0, "iqr", "higher"))
    assert not beats(noisy, best) and beats(clear, best) and not beats(marginal, best)
    clear.status = "rejected"
    assert not beats(clear, best)  # a rejected trial never wins, however fast


def test_a_compile_win_says_what_compiling_cost_and_when_it_pays_back():
    from gpulab.measure.results import Figure

    def fig(v):
        return Figure(v, "samples/s", 5, v * 0.95, v * 1.05, "iqr", "higher")

    eager = Trial("default", {}, samples_per_s=fig(640.0), warmup_s=1.0, batch_size=64)  # 0.1 s/step
    compiled = Trial(
        "compile=default", {"compile": True}, samples_per_s=fig(800.0), warmup_s=41.0, batch_size=64
    )
    text = Search({"recipe": "mlp"}, budget_s=1)._payback(compiled, eager)
    assert text == ", compile 40 s, pays back after 2,000 steps"  # 40 s / (0.1 - 0.08) s per step
