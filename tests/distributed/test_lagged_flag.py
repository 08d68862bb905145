"""``Runtime.lagged_flag`` on 2 real gloo ranks: a flag raised on one rank at one call is seen by every rank
at the next call and only there (what lets every rank stop at the same step after a signal, without a
blocking collective each step)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddp_job  # noqa: E402


@pytest.mark.distributed
def test_a_flag_on_one_rank_reaches_every_rank_one_call_late(tmp_path):
    procs = ddp_job.launch("lagged_flag", tmp_path)
    assert ddp_job.wait_all(procs, timeout=120) == [0, 0], ddp_job.logs(tmp_path)
    for rank in (0, 1):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)["lagged_flag"]
        assert result["seen"] == [False, False, False, False, True, False, False], (rank, result)
        assert result["last_waited_at_teardown"], rank  # nothing left in a backend thread at exit
