"""Which failures of a launched job are a rank's one-line mistake (said once by the launcher, exit 2) and
which are a crash (torchrun's summary), from what each rank left and how it ended; the real launch is in
tests/cli/test_cli_launch_rank_mistake.py."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from gpulab.distributed import rank_errors

LINE = "recipe 'r:build': build(options) raised ValueError: no data (--debug shows the traceback)"


def ended(**codes: int) -> dict[int, SimpleNamespace]:
    return {int(rank.removeprefix("r")): SimpleNamespace(exitcode=code) for rank, code in codes.items()}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(rank_errors.ENV, str(tmp_path))
    return tmp_path


def left(monkeypatch, rank: int, text: str = LINE) -> None:
    monkeypatch.setenv("RANK", str(rank))
    assert rank_errors.record(text)


def test_a_mistake_left_by_the_failed_ranks_is_said_once(folder, monkeypatch):
    left(monkeypatch, 1)
    assert rank_errors.peer_made_a_mistake()
    assert rank_errors.mistake(folder, ended(r1=2, r0=128 + signal.SIGTERM)) == LINE
    left(monkeypatch, 0)
    assert rank_errors.mistake(folder, ended(r0=2, r1=-signal.SIGTERM)) == LINE


def test_different_mistakes_name_the_first_rank(folder, monkeypatch):
    left(monkeypatch, 1)
    left(monkeypatch, 3, "another line")
    assert rank_errors.mistake(folder, ended(r1=2, r3=2)) == f"rank 1: {LINE}"


def test_a_crash_beside_a_mistake_is_torchruns_to_report(folder, monkeypatch):
    assert rank_errors.mistake(folder, ended(r0=1, r1=-signal.SIGTERM)) is None  # nothing left
    left(monkeypatch, 1)
    assert rank_errors.mistake(folder, ended(r0=3, r1=2)) is None
    # rank 0 killed -9 from outside; rank 1's collective then failed in one line: still a crash
    assert rank_errors.mistake(folder, ended(r0=-signal.SIGKILL, r1=2)) is None


def test_outside_a_launch_nothing_is_recorded(monkeypatch):
    monkeypatch.delenv(rank_errors.ENV, raising=False)
    monkeypatch.setenv("RANK", "0")
    assert not rank_errors.record(LINE) and not rank_errors.peer_made_a_mistake()


def test_a_restarted_group_is_not_taken_for_a_peers_mistake(folder, monkeypatch):
    # attempt 0: rank 1's collective failed in one line after rank 0 crashed; torchrun restarts the group
    monkeypatch.setenv(rank_errors.ATTEMPT_ENV, "0")
    left(monkeypatch, 1)
    monkeypatch.setenv(rank_errors.ATTEMPT_ENV, "1")
    assert not rank_errors.peer_made_a_mistake()  # a SIGTERM now is a preemption: checkpoint, not exit
    assert rank_errors.recorded(folder) == {1: LINE}  # what the launcher says if the job ends here
    left(monkeypatch, 0, "the second attempt's line")
    assert rank_errors.peer_made_a_mistake()
    assert rank_errors.recorded(folder) == {0: "the second attempt's line"}
