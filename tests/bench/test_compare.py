"""compare: a regression is flagged only beyond the measured spread of both runs."""

from __future__ import annotations

import copy
import subprocess
import sys

from gpulab.bench.compare import compare_results, environment_differences, unmatched, verdict
from gpulab.measure.results import SCHEMA_VERSION, Figure, validate


def fig(value, low, high, better="lower", unit="ms"):
    return Figure(value, unit, 5, low, high, "iqr", better)


def test_lower_is_better_regression_needs_disjoint_spreads():
    a = fig(10.0, 9.5, 10.5)
    assert verdict(a, fig(13.0, 12.5, 13.5)) == "regression"
    assert verdict(a, fig(13.0, 10.2, 15.0)) == "within noise"  # overlapping spreads: noise
    assert verdict(a, fig(7.0, 6.5, 7.5)) == "improvement"


def test_higher_is_better_is_mirrored():
    a = fig(100.0, 95.0, 105.0, better="higher")
    assert verdict(a, fig(80.0, 78.0, 82.0, better="higher")) == "regression"
    assert verdict(a, fig(120.0, 118.0, 125.0, better="higher")) == "improvement"


def test_tolerance_is_a_floor_for_spreadless_figures():
    a = Figure.single(10.0, "s", "lower")
    assert verdict(a, Figure.single(10.2, "s", "lower"), tolerance=0.05) == "within noise"
    assert verdict(a, Figure.single(12.0, "s", "lower"), tolerance=0.05) == "regression"


def test_figures_without_a_direction_are_information():
    assert verdict(fig(1.0, 1.0, 1.0, better=None), fig(9.0, 9.0, 9.0, better=None)) == "info"


def _doc(step_ms: float, spread: float) -> dict:
    row = {
        "key": {"model": "mlp", "variant": "eager"},
        "figures": {"step_time": fig(step_ms, step_ms - spread, step_ms + spread).to_json()},
        "info": {},
    }
    suite = {"title": "t", "status": "ok", "seconds": 1.0, "rows": [row], "notes": [], "plots": []}
    return {
        "schema_version": SCHEMA_VERSION,
        "created": "now",
        "config": {"profile": "quick"},
        "environment": {"device_name": "cpu A", "torch": "2.x"},
        "suites": {"compile": suite},
    }


def test_planted_regression_is_flagged_and_noise_is_not():
    a = _doc(10.0, 0.5)
    planted = _doc(20.0, 0.5)  # twice as slow, spreads far apart
    noisy = _doc(10.8, 0.5)  # slower, but inside the combined spread
    assert not validate(a) and not validate(planted)
    assert [c.verdict for c in compare_results(a, planted)] == ["regression"]
    assert [c.verdict for c in compare_results(a, noisy)] == ["within noise"]
    [c] = compare_results(a, planted)
    assert c.suite == "compile" and c.figure == "step_time" and c.ratio == 2.0


def test_rows_and_suites_missing_from_b_are_listed_and_environment_changes_named():
    a = _doc(10.0, 0.5)
    b = copy.deepcopy(a)
    b["suites"]["compile"]["rows"][0]["key"]["variant"] = "default"
    b["environment"]["device_name"] = "cpu B"
    assert compare_results(a, b) == []
    assert unmatched(a, b) == ["compile: model=mlp variant=eager"]
    assert environment_differences(a, b) == ["device_name: cpu A -> cpu B"]


def test_compare_reads_json_without_importing_torch():
    code = "import sys, gpulab.bench.compare, gpulab.measure.results; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
