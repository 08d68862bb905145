"""The Trainer on a stream (an IterableDataset, no length): max_steps, passes, accumulation, bad input."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset

from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError, DataError

N, BATCH = 40, 8  # 5 batches a pass


class Stream(IterableDataset):
    def __init__(self, n: int = N) -> None:
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.randn(4, 1, generator=g)

    def __iter__(self):
        return iter(zip(self.x, self.y, strict=True))


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 1)


def fit(data, **settings):
    settings = {"device": "cpu", "precision": "fp32", "progress": False, "batch_size": BATCH, **settings}
    trainer = Trainer(**settings)
    result = trainer.fit(
        model(), data, loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1, foreach=False)
    )
    return trainer, result


def by_hand(steps: int) -> dict:
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, foreach=False)
    done = 0
    while done < steps:
        for x, y in DataLoader(Stream(), batch_size=BATCH):
            F.mse_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done == steps:
                break
    return net.state_dict()


def test_a_stream_trains_max_steps_over_several_passes_like_a_hand_loop():
    trainer, result = fit(Stream(), max_steps=12)
    assert result.steps == 12 and result.epochs == 3  # passes of 5 steps: 5, 10, then 2 more
    for name, want in by_hand(12).items():
        torch.testing.assert_close(trainer.model.state_dict()[name], want, rtol=0, atol=0)


def test_a_users_dataloader_over_a_stream_works_too():
    _, result = fit(DataLoader(Stream(), batch_size=BATCH), max_steps=7)
    assert result.steps == 7


def test_a_stream_needs_max_steps():
    with pytest.raises(ConfigError, match="no length.*set max_steps"):
        fit(Stream(), epochs=2)


def test_a_partial_accumulation_window_at_the_end_of_a_pass_is_dropped_with_a_warning():
    with pytest.warns(UserWarning, match="1 micro-batch.*window of 2.*dropped"):
        trainer, result = fit(Stream(), max_steps=4, accumulate=2)
    # 5 micro-batches a pass: steps on batches (1,2), (3,4); the 5th is dropped; the next pass starts over.
    assert result.steps == 4 and result.epochs == 2
    assert all(p.grad is None for p in trainer.model.parameters())


def test_an_empty_stream_is_one_clear_error():
    with pytest.raises(DataError, match="gave no batch in epoch 0"):
        fit(Stream(0), max_steps=3)


def test_batch_size_auto_refuses_a_stream():
    with pytest.raises(ConfigError, match="batch_size: auto.*IterableDataset"):
        fit(Stream(), max_steps=3, batch_size="auto")


def test_resuming_mid_pass_lands_on_the_same_parameters(tmp_path):
    # Step 6 is one batch into the second pass: the resumed run skips that pass's first batch.
    full, _ = fit(Stream(), max_steps=12, out_dir=str(tmp_path), checkpoint_every=3, keep_last=None)
    step6 = tmp_path / "checkpoints" / "step-00000006"
    resumed = Trainer(
        device="cpu", precision="fp32", progress=False, batch_size=BATCH, max_steps=12, out_dir=str(tmp_path)
    )
    result = resumed.fit(
        model(), Stream(), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1, foreach=False),
        resume=str(step6),
    )  # fmt: skip
    assert result.steps == 12 and resumed.resumed_from == step6
    for name, want in full.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], want), name
