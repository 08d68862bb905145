"""Models as users bring them: a Hugging Face-style model (keyword arguments, its own loss, an output
object) trains from dict batches with no wrapper, and its weights load strictly into its own class."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from gpulab.engines.torch.state.api import resolve_checkpoint
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError, DataError

VOCAB, CLASSES, SEQ, N = 24, 4, 6, 192


@dataclass
class TaggerOutput:
    """Like a ``transformers`` ``ModelOutput``: ``loss`` only when ``labels`` were given."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


class TinyTagger(nn.Module):
    """Per-token classes, with a padding mask and an optional loss, the way Hugging Face models are
    called: ``forward(input_ids, attention_mask=None, labels=None)``."""

    def __init__(self, as_dict: bool = False) -> None:
        super().__init__()
        self.as_dict = as_dict
        self.embed = nn.Embedding(VOCAB, 32)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, input_ids, attention_mask=None, labels=None):
        hidden = self.norm(self.embed(input_ids))
        if attention_mask is not None:
            hidden = hidden * attention_mask.unsqueeze(-1)
        logits = self.head(hidden)
        loss = None
        if labels is not None:  # -100 marks padding, as in transformers
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        if self.as_dict:
            return {"logits": logits} if loss is None else {"loss": loss, "logits": logits}
        return TaggerOutput(logits, loss)


def _columns(n: int = N, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token ids with padded tails; each token's class is its id mod CLASSES (learnable), -100 on pads."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n, SEQ), generator=g)
    lengths = torch.randint(2, SEQ + 1, (n,), generator=g)
    mask = (torch.arange(SEQ) < lengths[:, None]).long()
    ids = ids * mask
    labels = torch.where(mask.bool(), ids % CLASSES, torch.full_like(ids, -100))
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class DictDataset(Dataset):
    def __init__(self, columns: dict[str, torch.Tensor]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["input_ids"])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {key: column[i] for key, column in self.columns.items()}


def _data(kind: str, seed: int = 0):
    columns = _columns(seed=seed)
    if kind == "tensors":  # the fast path: a dict of equal-length tensors
        return columns
    if kind == "dataset":
        return DictDataset(columns)
    return [{key: column[i] for key, column in columns.items()} for i in range(N)]  # a list of samples


def _trainer(**settings) -> Trainer:
    base = {"device": "cpu", "precision": "fp32", "batch_size": 32, "epochs": 4, "seed": 1, "progress": False}
    base.update(log_every=1, mfu=False)
    return Trainer(**{**base, **settings})


def _first_last_loss(trainer: Trainer) -> tuple[float, float]:
    losses = [h["loss"] for h in trainer.history if "loss" in h]
    return losses[0], losses[-1]


@pytest.mark.parametrize("kind", ["samples", "dataset", "tensors"])
def test_a_model_computing_its_own_loss_trains_from_dict_batches(tmp_path, kind):
    torch.manual_seed(0)
    model = TinyTagger()
    trainer = _trainer(out_dir=str(tmp_path))
    result = trainer.fit(
        model,
        _data(kind),
        val_data=_data(kind, seed=1),
        optimizer=lambda p: torch.optim.Adam(p, lr=3e-2),
    )  # no loss_fn: the model's own (output.loss)
    first, last = _first_last_loss(trainer)
    assert last < 0.5 * first
    assert result.steps == 4 * (N // 32)
    assert trainer.state.samples_seen == 4 * N  # samples counted from the dict batches
    # Accuracy from output.logits against batch["labels"], padding (-100) not counted; chance is 0.25.
    assert result.accuracy is not None and result.accuracy > 0.9
    # The saved weights are the user's module's own: they load strictly into a fresh TinyTagger.
    weights = load_file(resolve_checkpoint(tmp_path / "checkpoints") / "model.safetensors")
    fresh = TinyTagger()
    fresh.load_state_dict(weights, strict=True)
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name


def test_a_dict_output_with_a_loss_key_and_the_fast_path_match_the_dataset_path():
    """A ``{"loss", "logits"}`` output works like the dataclass; the dict-of-tensors fast path gives the
    same batches in the same order as a Dataset of dicts, so the two runs are identical."""
    runs = []
    for kind in ("tensors", "dataset"):
        torch.manual_seed(0)
        model = TinyTagger(as_dict=True)
        trainer = _trainer(epochs=2)
        trainer.fit(model, _data(kind), optimizer=lambda p: torch.optim.SGD(p, lr=0.5))
        runs.append(([h["loss"] for h in trainer.history], model.state_dict()))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-6)
    for name, value in runs[0][1].items():
        torch.testing.assert_close(value, runs[1][1][name])


def test_a_loss_fn_taking_the_batch_gets_the_mask():
    """``loss_fn(output, batch)`` (by the parameter's name) sees every input: here a masked loss on tags
    the model never sees (no ``labels``, so the model computes no loss of its own)."""
    columns = _columns()
    columns["tags"] = columns.pop("labels").clamp(min=0)  # pads get class 0: only the mask excludes them
    seen: list[set[str]] = []

    def masked_ce(output, batch):
        seen.append(set(batch))
        per_token = F.cross_entropy(output.logits.transpose(1, 2), batch["tags"], reduction="none")
        mask = batch["attention_mask"].float()
        return (per_token * mask).sum() / mask.sum()

    class Tagger(TinyTagger):  # takes the tags (every batch key is a keyword argument) but ignores them
        def forward(self, input_ids, attention_mask=None, tags=None):
            return super().forward(input_ids, attention_mask)

    torch.manual_seed(0)
    trainer = _trainer(epochs=3)
    trainer.fit(Tagger(), columns, loss_fn=masked_ce, optimizer=lambda p: torch.optim.Adam(p, lr=3e-2))
    first, last = _first_last_loss(trainer)
    assert last < 0.5 * first
    assert seen[0] == {"input_ids", "attention_mask", "tags"}


def test_a_loss_fn_of_output_and_target_gets_the_labels_of_a_dict_batch():
    def ce(output, target):
        return F.cross_entropy(output.logits.transpose(1, 2), target, ignore_index=-100)

    torch.manual_seed(0)
    trainer = _trainer(epochs=1)
    result = trainer.fit(
        TinyTagger(), _data("tensors"), loss_fn=ce, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)
    )
    assert result.steps == N // 32 and result.final_loss is not None


def test_an_optimizer_factory_taking_the_model_builds_weight_decay_groups():
    """The factory's parameter is named ``model``: it gets the user's module with its own names."""
    names_seen: list[str] = []

    def adamw(model):
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            names_seen.append(name)
            (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1e-2)

    torch.manual_seed(0)
    model = TinyTagger()
    trainer = _trainer(epochs=1)
    trainer.fit(model, _data("tensors"), optimizer=adamw)
    assert names_seen == [name for name, _ in model.named_parameters()]
    decay, no_decay = trainer.optimizer.param_groups
    assert {id(p) for p in decay["params"]} == {id(model.embed.weight), id(model.head.weight)}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0 and len(no_decay["params"]) == 3


def test_no_loss_anywhere_is_one_clear_error():
    data = _columns()
    del data["labels"]  # the model then returns no loss
    with pytest.raises(ConfigError, match="no loss: loss_fn is None .* pass loss_fn="):
        _trainer(epochs=1).fit(TinyTagger(), data, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))


def test_a_batch_the_trainer_cannot_call_the_model_with_is_one_clear_error():
    class Singles(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.zeros(3)

    with pytest.raises(DataError, match="cannot call the model with a batch of type Tensor.*dict of model"):
        _trainer(epochs=1).fit(nn.Linear(3, 1), Singles(), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))


def test_mfu_counts_the_flops_of_a_dict_batch_step():
    torch.manual_seed(0)
    trainer = _trainer(epochs=1, mfu=True)
    result = trainer.fit(TinyTagger(), _data("tensors"), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert result.extras["mfu"]["flops_per_sample"] > 0  # traced through model(**batch) and output.loss


@pytest.mark.parametrize("kind", ["tensors", "dataset"])
def test_the_oom_guard_splits_dict_batches(monkeypatch, kind):
    monkeypatch.setenv("GPULAB_INJECT_OOM", "0:1")  # rank 0 runs out of memory at the first attempt
    torch.manual_seed(0)
    trainer = _trainer(epochs=1, micro_batch="auto")
    result = trainer.fit(TinyTagger(), _data(kind), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert result.extras["oom"]["micro_batch"] == 16 and len(result.extras["oom"]["oom_recoveries"]) == 1
    assert result.steps == N // 32 and trainer.state.samples_seen == N


@dataclass
class TokenBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor


def test_a_dataloader_of_dataclass_batches_trains():
    """A collate_fn's batch object: its fields go to the model as keyword arguments."""

    def collate(samples):
        return TokenBatch(
            *(torch.stack([s[k] for s in samples]) for k in ("input_ids", "attention_mask", "labels"))
        )

    loader = torch.utils.data.DataLoader(_data("dataset"), batch_size=32, shuffle=True, collate_fn=collate)
    torch.manual_seed(0)
    trainer = _trainer(epochs=3)
    result = trainer.fit(
        TinyTagger(), loader, val_data=loader, optimizer=lambda p: torch.optim.Adam(p, lr=3e-2)
    )
    first, last = _first_last_loss(trainer)
    assert last < 0.5 * first and result.accuracy > 0.9
    assert trainer.state.samples_seen == 3 * N


def test_the_transfer_code_maps_the_tensors_of_a_dataclass_batch():
    from gpulab.engines.torch.data.transfer import iter_tensors, map_tensors

    batch = TokenBatch(torch.ones(2, 3), torch.zeros(2, 3), torch.arange(2))
    doubled = map_tensors(lambda t: t * 2, batch)  # what to_device does with .to(device)
    assert type(doubled) is TokenBatch and torch.equal(doubled.input_ids, torch.full((2, 3), 2.0))
    assert torch.equal(doubled.labels, torch.tensor([0, 2])) and len(list(iter_tensors(batch))) == 3


@pytest.mark.parametrize("kind", ["tensors", "dataset"])
def test_batch_size_auto_searches_with_dict_batches(kind):
    trainer = _trainer(batch_size="auto", epochs=1, memory_limit=64 << 20)
    trainer.fit(TinyTagger(), _data(kind), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    search = trainer.extras["batch_search"]
    assert search["batch_size"] >= 1 and search["trials"]  # real steps on dict batches decided it


def test_a_dict_key_forward_does_not_name_is_left_out_and_model_inputs_overrides_it():
    data = {
        **_columns(),
        "token_type_ids": torch.zeros(N, SEQ, dtype=torch.long),
    }  # forward has no such param: left out of the call
    _trainer(epochs=1).fit(TinyTagger(), data, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    with pytest.raises(DataError) as info:  # named by the setting: passed, and forward rejects it
        _trainer(epochs=1, model_inputs=["input_ids", "token_type_ids", "labels"]).fit(
            TinyTagger(), data, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)
        )
    message = str(info.value)
    assert (
        "'token_type_ids'" in message
        and "TinyTagger.forward(input_ids, attention_mask=None, labels=None)" in message
    )
    assert "set model_inputs to the keys forward takes" in message and "\n" not in message


def test_a_type_error_inside_forward_is_not_blamed_on_the_batch():
    class Broken(TinyTagger):
        def forward(self, input_ids, attention_mask=None, labels=None):
            return len(5)  # a bug in the model, not in the batch

    with pytest.raises(TypeError, match="has no len"):
        _trainer(epochs=1).fit(Broken(), _columns(), optimizer=lambda p: torch.optim.SGD(p, lr=0.1))


class KwargsTagger(TinyTagger):
    """A forward that also takes ``**kwargs``, as Hugging Face models' do: a misspelt key vanishes there."""

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        return super().forward(input_ids, attention_mask, labels)


def test_a_key_swallowed_by_forwards_kwargs_is_named_with_the_nearest_parameter():
    data = _columns()
    data["lables"] = data.pop("labels")  # the typo: no labels, so no loss, and no error from the call
    with pytest.raises(ConfigError) as info:
        _trainer(epochs=1).fit(KwargsTagger(), data, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    message = str(info.value)
    assert message.startswith("no loss: loss_fn is None")
    assert "keys ['lables'] are not named parameters of KwargsTagger.forward" in message
    assert "'lables' -> 'labels'?" in message and "\n" not in message


class PastTagger(TinyTagger):
    """A Hugging Face-like order: the second positional parameter is not the mask."""

    def forward(self, input_ids, past_key_values=None, attention_mask=None, labels=None):
        if past_key_values is not None:
            past_key_values.get_seq_length()  # a Tensor has no such method: transformers' error
        return super().forward(input_ids, attention_mask, labels)


def test_a_tuple_whose_inputs_go_positionally_into_optional_parameters_says_to_use_a_dict():
    c = _columns()
    data = (c["input_ids"], c["attention_mask"], c["labels"])  # the mask lands in past_key_values
    with pytest.raises(DataError) as info:
        _trainer(epochs=1).fit(
            PastTagger(),
            data,
            loss_fn=lambda out, y: out.logits.sum(),
            optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        )
    message = str(info.value)
    assert "PastTagger.forward failed (AttributeError:" in message
    assert (
        "passed positionally as (input_ids, past_key_values)" in message
        and "make each batch a dict" in message
    )
    assert isinstance(info.value.__cause__, AttributeError)


@pytest.mark.parametrize(("signature", "error"), [("required", AttributeError), ("optional", ValueError)])
def test_the_models_own_error_stands_when_the_binding_is_not_the_likely_cause(signature, error):
    """Inputs bound to required parameters, or a shape/value error (more often the model's own bug)."""

    class TwoInputs(nn.Linear):
        if signature == "required":

            def forward(self, x, y):
                raise error("a bug in the model")
        else:

            def forward(self, x, y=None):
                raise error("a bug in the model")

    data = (torch.zeros(8, 3), torch.zeros(8, 3), torch.zeros(8))
    with pytest.raises(error, match="a bug in the model"):
        _trainer(epochs=1).fit(
            TwoInputs(3, 1), data, loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.1)
        )
