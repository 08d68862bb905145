"""``gpulab bench compare A.json B.json``: B against A, figure by figure, judged against the noise.

Rows are matched by suite and key. For a figure with a direction, B is a regression when it is worse
than A by more than both runs' measured spread: the two spread intervals do not overlap, B on the bad
side. So a change within the noise is never flagged, however large the ratio looks on one repeat.
``tolerance`` adds a floor (a relative change below it is never flagged), for figures whose spread is
tiny or zero (a single repeat).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulab.measure.results import Figure

VERDICTS = ("regression", "improvement", "within noise", "info")


@dataclass(frozen=True)
class Comparison:
    suite: str
    key: str
    figure: str
    a: Figure
    b: Figure
    verdict: str

    @property
    def ratio(self) -> float | None:
        return self.b.value / self.a.value if self.a.value else None


def describe_key(key: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in key.items())


def compare_results(a: dict[str, Any], b: dict[str, Any], tolerance: float = 0.05) -> list[Comparison]:
    """Every figure both results have, with its verdict (see the module docstring)."""
    out = []
    for suite, suite_a in a["suites"].items():
        suite_b = b["suites"].get(suite)
        if suite_b is None:
            continue
        rows_b = {_row_id(r): r for r in suite_b["rows"]}
        for row_a in suite_a["rows"]:
            row_b = rows_b.get(_row_id(row_a))
            if row_b is None:
                continue
            for name, fig_a in row_a["figures"].items():
                if name in row_b["figures"]:
                    fa, fb = Figure.from_json(fig_a), Figure.from_json(row_b["figures"][name])
                    out.append(
                        Comparison(
                            suite, describe_key(row_a["key"]), name, fa, fb, verdict(fa, fb, tolerance)
                        )
                    )
    return out


def unmatched(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Suites and rows of A that B does not have (they cannot be compared)."""
    missing = []
    for suite, suite_a in a["suites"].items():
        suite_b = b["suites"].get(suite)
        if suite_b is None:
            missing.append(f"suite {suite}")
            continue
        ids = {_row_id(r) for r in suite_b["rows"]}
        missing += [f"{suite}: {describe_key(r['key'])}" for r in suite_a["rows"] if _row_id(r) not in ids]
    return missing


def verdict(a: Figure, b: Figure, tolerance: float = 0.05) -> str:
    if a.better is None or b.better != a.better or not _finite(a, b):
        return "info"
    higher = a.better == "higher"
    gain = (b.value - a.value) if higher else (a.value - b.value)  # > 0: B is better
    floor = tolerance * abs(a.value)
    # The spread intervals [low, high] of A and B do not overlap, B on the worse (better) side.
    worse_apart = b.high < a.low if higher else b.low > a.high
    better_apart = b.low > a.high if higher else b.high < a.low
    if worse_apart and -gain > floor:
        return "regression"
    if better_apart and gain > floor:
        return "improvement"
    return "within noise"


def _finite(*figures: Figure) -> bool:
    return all(x == x for f in figures for x in (f.value, f.low, f.high))  # NaN != NaN


def _row_id(row: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in row["key"].items()))


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The environment facts that differ between A and B: a reason a difference may not be a regression."""
    fields = ("device_name", "torch", "gpulab", "python", "torch_threads", "bench_device")
    ea, eb = a.get("environment", {}), b.get("environment", {})
    diffs = [f"{f}: {ea.get(f)} -> {eb.get(f)}" for f in fields if ea.get(f) != eb.get(f)]
    if a.get("config", {}).get("profile") != b.get("config", {}).get("profile"):
        diffs.append(f"profile: {a['config'].get('profile')} -> {b['config'].get('profile')}")
    return diffs
