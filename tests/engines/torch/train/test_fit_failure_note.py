"""The note under a failing fit's traceback, in process: a loader that raises, a validation that raises, and
how a batch's entries are described (the CLI cases are in tests/cli/test_cli_fit_failure.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from gpulab.engines.torch.train.failure import describe_batch
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ValidationFailed


class Samples(Dataset):
    """64 samples of 4 features; reading sample ``bad`` raises (a corrupt file, a decoding bug)."""

    def __init__(self, bad: int | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y, self.bad = torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g), bad

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        if i == self.bad:
            raise OSError(f"cannot read sample {i}")
        return self.x[i], self.y[i]


class FailsInEval(nn.Linear):
    def forward(self, x):
        if not self.training:
            raise RuntimeError("my validation path is broken")
        return super().forward(x)


def _fit(model, data, **settings):
    trainer = Trainer(device="cpu", batch_size=8, progress=False, mfu=False, **settings)
    return trainer.fit(
        model,
        data,
        loss_fn=nn.functional.mse_loss,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        val_data=data,
    )


def test_a_loader_that_raises_is_named_as_the_batch_being_made():
    with pytest.raises(OSError, match="cannot read sample 5") as err:
        _fit(nn.Linear(4, 1), Samples(bad=5))
    (note,) = err.value.__notes__
    assert note.startswith("gpulab: the fit failed in step ")
    assert note.endswith(
        "/8, while the data loader made it); no checkpoint (no out_dir or checkpoint_dir to write them to)"
    ), note


def test_a_validation_that_raises_is_named_after_its_step():
    with pytest.raises(ValidationFailed, match="validation failed at step 8") as err:
        _fit(FailsInEval(4, 1), Samples())
    cause = err.value.__cause__  # the user's own error, whose traceback the CLI prints, carries the note
    assert isinstance(cause, RuntimeError) and "validation path" in str(cause)
    (note,) = cause.__notes__
    assert note.startswith(
        "gpulab: the fit failed in validation after step 8 (validation batch 1: (8, 4) float32"
    )


def test_a_batch_is_described_entry_by_entry():
    ids, labels = torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    assert describe_batch({"input_ids": ids, "labels": labels}) == "input_ids (2, 3) int64, labels (2,) int64"
    assert describe_batch((ids, [ids, labels], "meta")) == "(2, 3) int64, [(2, 3) int64, (2,) int64], str"
