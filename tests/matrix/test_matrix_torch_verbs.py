"""The matrix lane's torch cells whose verb is export (with infer), tune or profile (tests/matrix/setups.py)."""

from __future__ import annotations

import pytest
from lane import judged, params
from setups import cells
from torch_cell import run_cell

CELLS = [c for c in cells() if c["engine"] == "torch" and c["verb"] != "resume"]


@pytest.mark.parametrize("cell", params(CELLS))
def test_cell_trains_to_its_end_and_serves_its_verb(cell, gpulab_server, tmp_path):
    judged(cell, lambda: run_cell(gpulab_server, cell, tmp_path))
