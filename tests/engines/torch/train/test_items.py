"""A loss that is a mean over tokens (labels -100 on padding): accumulation and several ranks give the
large batch's gradient, micro-batches weighed by their tokens (train/items.py), not averaged alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gpulab.engines.torch.train.items import token_cross_entropy
from gpulab.engines.torch.train.trainer import Trainer

VOCAB, SEQ, N = 20, 12, 64


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB)

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


def data():
    """Token ids whose padded tails (of very different lengths) are labelled -100."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (N, SEQ), generator=g)
    lengths = torch.randint(1, SEQ + 1, (N,), generator=g)
    labels = torch.where(torch.arange(SEQ) < lengths[:, None], (ids + 1) % VOCAB, -100)
    return ids, labels


def sgd(params):
    return torch.optim.SGD(params, lr=0.5)


def settings(**overrides):
    base = {"device": "cpu", "precision": "fp32", "max_steps": 3, "seed": 2, "progress": False}
    return {**base, "mfu": False, "log_every": 1, "tensorboard": False, **overrides}


def _fit(model, loss_fn=token_cross_entropy, train=None, **overrides) -> dict[str, torch.Tensor]:
    return _fitted(model, loss_fn, train, **overrides)[0]


def _fitted(model, loss_fn=token_cross_entropy, train=None, **overrides):
    """(the weights, the loss logged at each step)."""
    trainer = Trainer(**settings(**overrides))
    trainer.fit(model, train if train is not None else data(), loss_fn=loss_fn, optimizer=sgd)
    logged = {h["step"]: h["loss"] for h in trainer.history if "loss" in h}
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, logged


def _close(got: dict, want: dict, atol: float = 1e-6) -> None:
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=atol, msg=name)


def test_accumulating_4_micro_batches_of_padded_tokens_equals_one_batch_of_16():
    whole, whole_logged = _fitted(Tagger(), batch_size=16)
    accumulated, logged = _fitted(Tagger(), batch_size=4, accumulate=4)
    _close(accumulated, whole)
    # The logged loss is the large batch's too: the micro-batches' means weighed by their tokens.
    assert logged.keys() == whole_logged.keys() == {1, 2, 3}
    for step, loss in whole_logged.items():
        assert abs(logged[step] - loss) < 1e-6, (step, logged[step], loss)


def test_a_hugging_face_models_own_loss_is_weighed_by_its_tokens_under_accumulation():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    ids, labels = data()

    def model():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config)

    batches = {"input_ids": ids, "labels": labels}
    whole, whole_logged = _fitted(model(), loss_fn=None, train=batches, batch_size=16)
    accumulated, logged = _fitted(model(), loss_fn=None, train=batches, batch_size=4, accumulate=4)
    _close(accumulated, whole)
    assert all(abs(logged[step] - loss) < 1e-6 for step, loss in whole_logged.items())


def test_two_gloo_ranks_accumulating_2_equal_one_batch_of_16(tmp_path):
    from gpulab.engines.torch.distributed.process_group import free_port

    out, port = tmp_path / "params.pt", str(free_port())
    job = Path(__file__).with_name("items_job.py")
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        env |= {"LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        env |= {"OMP_NUM_THREADS": "1"}
        log = open(tmp_path / f"rank{rank}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, str(job), str(out)], env=env, stdout=log, stderr=log))
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], "\n".join((tmp_path / f"rank{r}.log").read_text()[-3000:] for r in range(2))
    _close(torch.load(out), _fit(Tagger(), batch_size=16))
