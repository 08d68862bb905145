"""The matrix lane's generator: its cells cover every pair of values two axes can hold, and docs/MATRIX.md is
the page scripts/matrix_table.py renders for these cells (never a hand-written table)."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from setups import AXES, NOT_WITH, cells, pairwise, uncovered_pairs

ROOT = Path(__file__).resolve().parents[2]


def table_script():
    spec = importlib.util.spec_from_file_location("matrix_table", ROOT / "scripts" / "matrix_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cells_cover_every_allowed_pair_and_hold_no_excluded_one():
    rows = pairwise()
    assert uncovered_pairs(rows) == []
    excluded = {frozenset((a, b)) for a, b, _ in NOT_WITH}
    for row in rows:
        held = {frozenset((f"{x}={row[x]}", f"{y}={row[y]}")) for x, y in itertools.combinations(AXES, 2)}
        assert not held & excluded, row
    # Far fewer than the full product: pairwise, not every combination.
    assert len(rows) < 40


def test_docs_matrix_is_the_rendered_page_for_these_cells():
    script = table_script()
    doc = (ROOT / "docs" / "MATRIX.md").read_text()
    verdicts, lane_time = script.from_doc(doc)
    assert set(verdicts) == {c.id for c in cells()}, (
        "a cell without its verdict: run the lane, then the script"
    )
    assert "not run" not in verdicts.values()
    assert doc == script.render(verdicts, lane_time), (
        "docs/MATRIX.md is stale: python scripts/matrix_table.py"
    )
