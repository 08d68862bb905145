"""torch.distributed.checkpoint files are read without running code from them
(``engines/torch/state/dcp_safe.py``).

One process, no process group: DCP then saves and loads locally, through the same reader and planner the
sharded resume uses. The two-rank, through-the-CLI refusal is in tests/distributed/test_dcp_refuse.py.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from gpulab.engines.torch.state.dcp_safe import SafeFileSystemReader, SafeLoadPlanner, read_metadata
from gpulab.errors import CheckpointError


class Payload:
    """Unpickling this runs ``touch MARKER``: what a hostile checkpoint would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _state() -> dict:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def test_metadata_torch_writes_is_admitted_and_loads_back(tmp_path):
    saved = _state()
    dcp.save(saved, checkpoint_id=tmp_path)
    metadata = read_metadata(tmp_path / ".metadata")
    assert "optimizer.param_groups.0.lr" in metadata.state_dict_metadata  # a byte item, not a tensor
    target = _state()
    target["optimizer"]["param_groups"][0]["lr"] = 1.0
    dcp.load(target, storage_reader=SafeFileSystemReader(tmp_path), planner=SafeLoadPlanner())
    assert target["optimizer"]["param_groups"][0]["lr"] == 0.01
    torch.testing.assert_close(target["model"], saved["model"], rtol=0, atol=0)


def test_metadata_with_a_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(CheckpointError, match=r"refused pickle content \(posix.system is not allowed\)"):
        read_metadata(tmp_path / ".metadata")
    with pytest.raises((CheckpointError, CheckpointException, AssertionError)):
        dcp.load(_state(), storage_reader=SafeFileSystemReader(tmp_path), planner=SafeLoadPlanner())
    assert not marker.exists()


def test_metadata_of_another_type_or_garbled_is_refused(tmp_path):
    (tmp_path / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    with pytest.raises(CheckpointError, match="expected DCP Metadata, found dict"):
        read_metadata(tmp_path / ".metadata")
    (tmp_path / ".metadata").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CheckpointError, match="corrupt .metadata"):
        read_metadata(tmp_path / ".metadata")


def test_a_storage_entry_outside_the_checkpoint_is_refused(tmp_path):
    dcp.save(_state(), checkpoint_id=tmp_path)
    metadata = read_metadata(tmp_path / ".metadata")
    next(iter(metadata.storage_data.values())).relative_path = "../elsewhere.distcp"
    (tmp_path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="'../elsewhere.distcp' is not a file in the checkpoint"):
        read_metadata(tmp_path / ".metadata")


def test_a_byte_item_with_a_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    dcp.save({"extra": Payload(marker)}, checkpoint_id=tmp_path / "ckpt")  # torch.save'd as a byte item
    assert not marker.exists()
    target = {"extra": None}
    with pytest.raises(CheckpointException, match="posix.system"):
        dcp.load(target, storage_reader=SafeFileSystemReader(tmp_path / "ckpt"), planner=SafeLoadPlanner())
    assert not marker.exists()
    dcp.load(target, checkpoint_id=tmp_path / "ckpt")  # torch's own planner: the payload runs
    assert marker.exists()


def test_inspect_reports_a_sharded_checkpoint_whose_metadata_carries_a_payload(tmp_path):
    from gpulab.checkpoint.io import write_manifest
    from gpulab.checkpoint.save import commit_checkpoint, meta_bytes
    from gpulab.engines.torch.state.api import inspect_checkpoint
    from gpulab.engines.torch.state.rng import capture_rng

    tmp, state = tmp_path / ".tmp-step", {"rng": capture_rng()}
    dcp.save(_state(), checkpoint_id=tmp)
    step = commit_checkpoint(
        tmp, tmp_path, "step-00000001", state, meta_bytes(1, state, {}), layout="sharded"
    )
    assert inspect_checkpoint(step)["valid"]
    marker = tmp_path / "ran"
    (step / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    (step / "MANIFEST.json").unlink()
    write_manifest(step, layout="sharded")
    report = inspect_checkpoint(step)
    assert not report["valid"] and not marker.exists()
    assert report["problems"] == [
        f"{step / '.metadata'}: refused pickle content (posix.system is not allowed); a sharded "
        "checkpoint's .metadata may hold only torch.distributed.checkpoint's metadata classes"
    ]


def test_inspect_reports_a_sharded_checkpoint_whose_byte_item_carries_a_payload_as_resume_does(tmp_path):
    """The manifest verifies and .metadata is clean: only reading the byte item, as resume does, finds it."""
    from gpulab.checkpoint.save import commit_checkpoint, meta_bytes
    from gpulab.engines.torch.state.api import inspect_checkpoint
    from gpulab.engines.torch.state.rng import capture_rng

    marker = tmp_path / "ran"
    tmp, state = tmp_path / ".tmp-step", {"rng": capture_rng()}
    dcp.save({**_state(), "extra": Payload(marker)}, checkpoint_id=tmp)  # torch.save'd as a byte item
    step = commit_checkpoint(
        tmp, tmp_path, "step-00000001", state, meta_bytes(1, state, {}), layout="sharded"
    )
    read_metadata(step / ".metadata")  # the index itself is clean
    report = inspect_checkpoint(step)
    assert not report["valid"] and not marker.exists()
    from gpulab.engines.torch.state.dcp_safe import refused  # resume's line for what its load raises

    with pytest.raises(CheckpointException) as resumed:  # what resume's load reads, and its line
        dcp.load({"extra": None}, storage_reader=SafeFileSystemReader(step), planner=SafeLoadPlanner())
    assert report["problems"] == [str(refused(step, resumed.value))]
    assert "sharded state refused" in report["problems"][0] and "posix.system" in report["problems"][0]
    assert not marker.exists()


def test_inspect_reads_every_item_of_a_clean_sharded_checkpoint_in_batches(tmp_path):
    from gpulab.engines.torch.state.dcp_safe import check_items

    dcp.save(_state(), checkpoint_id=tmp_path)
    metadata = check_items(tmp_path / ".metadata", batch_bytes=1)  # one item a batch: every batch loads
    assert "optimizer.param_groups.0.lr" in metadata.state_dict_metadata
