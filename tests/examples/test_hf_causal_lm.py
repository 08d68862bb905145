"""examples/hf_causal_lm.py: a Hugging Face GPT-2 from a config trains as written (dict batches, its own
loss, no wrapper), equals a hand-written loop, and its checkpoint loads with ``from_pretrained``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpulab.core.recipes.base import load_recipe
from gpulab.engines.torch.data.tensor_batches import epoch_permutation
from gpulab.engines.torch.train.trainer import Trainer

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root
STEPS, BATCH = 8, 8
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # GPT2Config fields, via options


def hand_loop(model, optimizer, input_ids, steps, batch):
    """What the Trainer must equal: the same seed-ordered batches, forward with labels, AdamW."""
    order = epoch_permutation(len(input_ids), seed=0, epoch=0)
    losses = []
    for step in range(steps):
        ids = input_ids[order[step * batch : (step + 1) * batch]]
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_the_example_trains_equals_a_hand_loop_and_its_checkpoint_loads_with_from_pretrained(
    monkeypatch, tmp_path, one_thread
):
    monkeypatch.syspath_prepend(str(ROOT))
    torch.manual_seed(0)
    recipe = load_recipe("examples.hf_causal_lm:build", NO_DROPOUT)
    model = recipe.model
    config = model.config
    start = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(
        device="cpu", precision="fp32", max_steps=STEPS, batch_size=BATCH, log_every=1, seed=0,
        out_dir=str(tmp_path), tensorboard=False, progress=False, mfu=False,
    )  # fmt: skip
    result = trainer.fit(model, recipe.train_data, loss_fn=recipe.loss_fn, optimizer=recipe.optimizer)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == STEPS
    assert losses[-1] < losses[0] - 0.3, losses  # it learns: from ln(256) ~ 5.5 down

    # Parity: the same start, batches and optimizer by hand give the same losses and weights.
    by_hand = transformers.GPT2LMHeadModel(config)
    by_hand.load_state_dict(start)
    hand_losses = hand_loop(
        by_hand, recipe.optimizer(by_hand.parameters()), recipe.train_data["input_ids"], STEPS, BATCH
    )
    assert losses == pytest.approx(hand_losses, rel=1e-5, abs=1e-5)
    torch.testing.assert_close(model.state_dict(), by_hand.state_dict(), rtol=1e-4, atol=1e-5)

    # The checkpoint is a from_pretrained directory: config.json beside model.safetensors, the user's names.
    checkpoint = tmp_path / "checkpoints" / f"step-{result.steps:08d}"
    assert json.loads((checkpoint / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    loaded = transformers.AutoModelForCausalLM.from_pretrained(checkpoint)
    assert type(loaded) is transformers.GPT2LMHeadModel
    torch.testing.assert_close(loaded.state_dict(), model.state_dict(), rtol=0, atol=0)
    from safetensors.torch import load_file

    fresh = transformers.GPT2LMHeadModel(config)
    assert not fresh.load_state_dict(load_file(checkpoint / "model.safetensors"), strict=True).missing_keys


def test_a_causal_lms_val_accuracy_is_next_token_accuracy(monkeypatch, one_thread):
    # GPT-2's loss shifts its labels (logits at t predict token t+1); read unshifted, its tied
    # embeddings echo the input and an untrained model scores ~90 %: accuracy must be read shifted too.
    monkeypatch.syspath_prepend(str(ROOT))
    torch.manual_seed(0)
    recipe = load_recipe("examples.hf_causal_lm:build", NO_DROPOUT)
    val = {k: v[:32] for k, v in recipe.val_data.items()}
    trainer = Trainer(
        device="cpu", precision="fp32", max_steps=1, batch_size=BATCH, seed=0, tensorboard=False,
        progress=False, mfu=False, checkpoints=False,
    )  # fmt: skip
    result = trainer.fit(
        recipe.model, recipe.train_data, val_data=val, loss_fn=None, optimizer=recipe.optimizer
    )
    with torch.no_grad():
        predicted = recipe.model.eval()(input_ids=val["input_ids"]).logits.argmax(-1)
    ids = val["input_ids"]
    assert (predicted == ids).float().mean() > 0.5  # the echo an unshifted reading would report
    next_token = (predicted[:, :-1] == ids[:, 1:]).float().mean().item()
    assert result.accuracy == pytest.approx(next_token, abs=1e-6)
    assert result.accuracy < 0.3
