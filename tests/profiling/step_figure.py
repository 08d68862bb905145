"""The profile's printed step figures, read back: the table's step row and the line under it are one number."""

from __future__ import annotations

import re

import pytest


def assert_one_step_figure(out: str, report: dict) -> None:
    """The table's step (ms), the line's step and samples/s all come from ``breakdown_s["step"]``."""
    (row,) = [line for line in out.splitlines() if re.match(r"│ *step *│", line)]
    table_ms = float(row.split("│")[2])
    line_ms = float(re.search(r"^step ([\d.]+) ms \(the table's mean", out, re.M).group(1))
    step_ms = report["breakdown_s"]["step"] * 1e3
    assert table_ms == line_ms == pytest.approx(step_ms, abs=0.006), out
    rate = float(re.search(r"([\d,]+) samples/s at that step", out).group(1).replace(",", ""))
    samples = report["batch_size"] * report.get("accumulate", 1) * report.get("world_size", 1)
    assert rate == pytest.approx(samples / report["breakdown_s"]["step"], abs=1), out
