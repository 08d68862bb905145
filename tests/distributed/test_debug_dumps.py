"""Flight-recorder dumps go under the run's directory, not /tmp (``distributed/debug_dumps.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_job import JOB  # noqa: E402

from gpulab.distributed import debug_dumps as D  # noqa: E402
from gpulab.distributed import launch as L  # noqa: E402

VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(L, "local_accelerator", lambda: ("cuda", 4))


def test_nccl_launch_with_a_log_dir_sends_dumps_there(four_gpus, tmp_path):
    plan = L.plan_launch(L.LaunchSpec(command=[JOB], log_dir=str(tmp_path / "logs")), environ={})
    assert plan.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    prefix = str(tmp_path.resolve() / "logs" / "flight_recorder" / "nccl_trace_rank_")
    assert {k: plan.env[k] for k in VARS if k in plan.env} == {"TORCH_FR_DUMP_TEMP_FILE": prefix}


def test_launch_leaves_the_place_to_the_user_or_the_trainer(four_gpus, tmp_path):
    spec = L.LaunchSpec(command=[JOB], log_dir=str(tmp_path))
    mine = L.plan_launch(spec, environ={"TORCH_FR_DUMP_TEMP_FILE": "/data/fr_"}).env
    assert "TORCH_FR_DUMP_TEMP_FILE" not in mine  # the user's value is inherited as it is
    assert not set(VARS) & set(L.plan_launch(L.LaunchSpec(command=[JOB]), environ={}).env)


def test_a_run_directs_dumps_under_its_out_dir_and_a_later_run_moves_them(tmp_path):
    env: dict[str, str] = {}
    D.direct_dumps_to(tmp_path / "run1", env)
    assert env == {
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path.resolve() / "run1" / "flight_recorder" / "nccl_trace_rank_")
    }
    D.direct_dumps_to(tmp_path / "run2", env)
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str(tmp_path.resolve() / "run2"))
    D.make_dump_dir(env)
    assert (tmp_path / "run2" / "flight_recorder").is_dir()  # torch's writer does not create it


def test_a_users_choice_is_kept(tmp_path):
    env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/data/trace_"}
    D.direct_dumps_to(tmp_path, env)
    assert env == {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/data/trace_"}


@pytest.mark.parametrize(
    ("version", "buffer", "dump"),
    [("2.13.0+cpu", "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"),
     ("2.6.0", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")],
)  # fmt: skip
def test_only_the_name_this_torch_reads_is_set(monkeypatch, version, buffer, dump):
    # torch 2.11 printed "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" on every rank of an H100 run.
    monkeypatch.setattr(D, "_torch_version", lambda: version)
    assert D.trace_buffer_env({}) == {buffer: "2000"}
    assert list(D.flight_recorder_env("/run")) == [dump]
    assert D.trace_buffer_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "10"}) == {}  # the user's, by either name
