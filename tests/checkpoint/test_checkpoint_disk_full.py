"""A full disk while a checkpoint is written: one line naming the directory and the bytes needed, exit 2,
the previous checkpoint still ``latest``, and no temporary directory left behind. The disk is faked: the
write raises ``OSError(ENOSPC)`` after writing part of the file, as a real full disk does."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from gpulab.checkpoint import save as checkpoint_save
from gpulab.cli import main
from gpulab.engines.torch.state.api import capture_rng, save_checkpoint
from gpulab.errors import CheckpointError


def _fill_disk_on_call(monkeypatch, target: str, nth: int) -> None:
    """Make the ``nth`` call of ``checkpoint_save.<target>`` write a few bytes, then fail with ENOSPC."""
    real, calls = getattr(checkpoint_save, target), [0]

    def full(*args, **kwargs):
        calls[0] += 1
        if calls[0] < nth:
            return real(*args, **kwargs)
        path = next(a for a in args if isinstance(a, (str, os.PathLike)))
        with open(path, "wb") as handle:
            handle.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(checkpoint_save, target, full)


def test_a_full_disk_in_train_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, capsys):
    _fill_disk_on_call(monkeypatch, "save_file", nth=2)  # the step-10 checkpoint is written, step 20 is not
    out = tmp_path / "run"
    code = main(["train", "mlp", "--out", str(out), "--max-steps", "30", "--set", "checkpoint_every=10",
                 "--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"])  # fmt: skip
    err = capsys.readouterr().err
    root = out / "checkpoints"
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{root}: no space left on the device to write checkpoint step-00000020" in err
    assert "bytes" in err and "step-00000010 stays the latest checkpoint" in err
    assert (root / "latest").read_text().strip() == "step-00000010"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000010"]  # no .tmp-* left


def test_a_full_disk_while_writing_the_state_leaves_no_temp_directory(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, step=1, model_state={"w": torch.ones(4)}, state={"rng": capture_rng()}, meta={})
    _fill_disk_on_call(monkeypatch, "write_bytes_durably", nth=1)  # meta.json, after state.pt
    with pytest.raises(CheckpointError, match=r"no space left .* checkpoint step-00000002 .*needs about"):
        save_checkpoint(tmp_path, step=2, model_state={"w": torch.ones(4)}, state={"rng": capture_rng()},
                        meta={})  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001"]
    assert (tmp_path / "latest").read_text().strip() == "step-00000001"


def test_a_disk_without_room_for_the_state_is_found_before_torchs_zip_writer_starts(tmp_path, monkeypatch):
    """torch's C++ zip writer reports a full disk as its own ``unexpected pos`` error with its records half
    written; a disk that visibly lacks the state's bytes is refused before it starts, in the one line."""
    import shutil

    save_checkpoint(tmp_path, step=1, model_state={"w": torch.ones(4)}, state={"rng": capture_rng()}, meta={})
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=100))  # 100 bytes left
    saved = []
    monkeypatch.setattr(torch, "save", lambda *a, **k: saved.append(a))
    big = {"rng": capture_rng(), "optimizer": {"m": torch.ones(4096)}}
    with pytest.raises(CheckpointError, match=r"no space left .* checkpoint step-00000002 .*needs about"):
        save_checkpoint(tmp_path, step=2, model_state={"w": torch.ones(4)}, state=big, meta={})
    assert saved == []  # torch's writer never started
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001"]
