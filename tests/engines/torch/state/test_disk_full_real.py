"""A really full disk (a small tmpfs), wherever the write fails: inside torch's ``state.pt`` writer, in
DCP's shard files, in TensorFlow's SaveV2, and at the run directory's lock file. Each ends in one line
naming the directory, the bytes needed and free (exit 2), and the previous checkpoint stays ``latest``,
verifies and resumes. The exact exception shapes each library raises are checked without a disk too."""

from __future__ import annotations

import errno
import json
import math
import os
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from gpulab.checkpoint.save import is_disk_full
from gpulab.cli import main
from gpulab.engines.torch.state.api import capture_rng, inspect_checkpoint
from gpulab.errors import CheckpointError

PAGE = 4096  # tmpfs counts whole pages per file
QUIET = ["--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"]


def _pages(directory: Path) -> dict[str, int]:
    return {p.name: math.ceil(p.stat().st_size / PAGE) for p in directory.iterdir()}


def _fill(disk: Path) -> None:
    """Write until the disk refuses a byte more."""
    with open(disk / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * PAGE)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
def test_a_disk_filling_inside_state_pt_is_one_line_and_the_previous_checkpoint_resumes(
    tmpfs, capsys, one_thread
):  # one intra-op thread: chargpt's two threads wait for each other beside the other xdist worker
    # The trial's case: the step-8 weights fit, state.pt does not, and torch's zip writer replaces the
    # ENOSPC by its own RuntimeError ("unexpected pos"), the OSError only in its __context__.
    disk = tmpfs(8 * 2**20)
    out, root = disk / "c", disk / "c" / "checkpoints"
    run = ["train", "chargpt", "--out", str(out), "--max-steps", "12", "--set", "checkpoint_every=4",
           "--set", "options.max_chars=20000", "--set", "mfu=false", "--set", "progress=false"]  # fmt: skip
    code = main(run)
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(
        f"gpulab: error: {root}: no space left on the device to write checkpoint step-00000008"
    )
    assert "bytes, " in line and " are free" in line and "step-00000004 stays the latest checkpoint" in line
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000004"]  # no .tmp-*, no lock
    assert inspect_checkpoint(root / "step-00000004")["valid"]

    tmpfs.resize(disk, 64 * 2**20)  # space freed: the run continues from step 4
    assert main([*run, "--resume", "latest"]) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["resumed_from"] == str(root / "step-00000004")


def test_an_out_on_a_full_disk_is_one_line_and_leaves_nothing(tmpfs, capsys):
    disk = tmpfs(64 * PAGE)
    _fill(disk)
    out = disk / "run"
    code = main(["train", "mlp", "--out", str(out), "--max-steps", "2", *QUIET])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"gpulab: error: {out}: no space left on the device to start a run")
    assert "bytes, 0 are free" in line
    assert not out.exists()  # no empty directory, no lock file left behind


class _OneProcess:
    """What ``save_sharded_checkpoint`` asks of a strategy, for one process (DCP runs without a group)."""

    is_rank_zero = True

    def broadcast(self, obj):
        return obj

    def run_on_rank_zero(self, fn, *, name):
        return fn()

    def collective(self, name):
        return nullcontext()


def test_a_disk_filling_in_dcp_shard_writes_is_one_line_and_keeps_the_previous_checkpoint(tmpfs):
    from gpulab.engines.torch.state.sharded import save_sharded_checkpoint

    disk = tmpfs(64 * PAGE)
    root = disk / "ck"

    def save(step: int, numel: int):
        return save_sharded_checkpoint(
            root, step=step, shards={"model": {"w": torch.ones(numel)}}, state={"rng": capture_rng()},
            meta={}, strategy=_OneProcess(),
        )  # fmt: skip

    save(1, 1000)
    with pytest.raises(CheckpointError) as caught:
        save(2, 64 * PAGE)  # a shard bigger than the disk
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"{root}: no space left on the device to write checkpoint step-00000002")
    assert f"needs about {64 * PAGE * 4:,} bytes" in line and "step-00000001 stays the latest" in line
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000001"]
    assert inspect_checkpoint(root / "step-00000001")["valid"]


# --- the exception shapes, without a disk ----------------------------------------------------------------


def _raised_inside(outer: type[BaseException], message: str, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException:
            raise outer(message)  # noqa: B904 - implicit chaining (__context__) is what torch's writer does
    except BaseException as exc:
        return exc


def test_disk_full_is_found_wherever_a_library_puts_it():
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    torch_zip = _raised_inside(
        RuntimeError, "[enforce fail at inline_container.cc:672] . unexpected pos 704", enospc
    )
    assert is_disk_full(torch_zip)  # the OSError is only in __context__
    caused = RuntimeError("wrapped")
    caused.__cause__ = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert is_disk_full(caused)
    tf_text = (
        "{{function_node __wrapped__SaveV2}} /x/ckpt_temp/part-0.data; No space left on device [Op:SaveV2]"
    )
    assert is_disk_full(type("ResourceExhaustedError", (Exception,), {})(tf_text))
    from torch.distributed.checkpoint.api import CheckpointException

    assert is_disk_full(CheckpointException("save", {1: (torch_zip, None)}))
    assert not is_disk_full(_raised_inside(RuntimeError, "unexpected pos 1 vs 2", ValueError("other")))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
