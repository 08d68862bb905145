"""``resume_data: skip`` and a loader that keeps its own state (issue 39, Build 3).

Skip: a user's shuffling DataLoader resumed mid-epoch on a fresh object (as in a new process) yields the
uninterrupted run's remaining batches without loading any item of the consumed ones, says in one line what
it does not replay, and leaves the training's random streams as the checkpoint had them. A stream cannot
skip: one line. A loader with its own ``state_dict`` (torchdata's ``StatefulDataLoader``) is resumed by
its own state, nothing replayed."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from gpulab.engines.torch.data import make_loader
from gpulab.errors import ConfigError, GpulabWarning


class Counted(Dataset):
    """Its index and a draw from the global streams (an augmentation); counts the items it loads."""

    def __init__(self) -> None:
        self.loaded: list[int] = []

    def __len__(self):
        return 20

    def __getitem__(self, index):
        self.loaded.append(index)
        return torch.tensor(index), torch.rand(()) + random.random()


def build(generator: bool, mode: str, dataset: Dataset | None = None):
    g = torch.Generator().manual_seed(5) if generator else None
    loader = DataLoader(dataset or Counted(), batch_size=3, shuffle=True, generator=g)
    return make_loader(loader, batch_size=1, device="cpu", resume_data=mode)


def order(source, epochs: range) -> list[tuple[int, list[int]]]:
    out = []
    for epoch in epochs:
        source.set_epoch(epoch)
        out += [(epoch, b[0].tolist()) for b in source]
    return out


@pytest.mark.parametrize("generator", [True, False], ids=["own-generator", "global-rng"])
def test_skip_resumes_the_same_order_loading_none_of_the_consumed_batches(generator):
    torch.manual_seed(0)
    full = order(build(generator, "skip"), range(3))  # 7 batches an epoch
    torch.manual_seed(0)
    run = build(generator, "skip")
    head = order(run, range(1))
    run.set_epoch(1)
    iterator = iter(run)
    head += [(1, next(iterator)[0].tolist()) for _ in range(5)]
    state, streams = run.state_dict(), torch.get_rng_state()  # what a checkpoint keeps

    torch.manual_seed(123)  # the new process's stream, until the checkpoint's is put back
    fresh = build(generator, "skip", dataset := Counted())
    fresh.load_state_dict(state)
    torch.set_rng_state(streams)
    fresh.set_epoch(1)
    with pytest.warns(GpulabWarning) as caught:
        resumed = iter(fresh)
    after = torch.get_rng_state()
    assert torch.equal(after, streams)  # the training's stream untouched by what the loader drew
    tail = [(1, b[0].tolist()) for b in resumed] + order(fresh, range(2, 3))
    assert head + tail == full
    resumed_items = [i for _, batch in tail[:2] for i in batch]
    assert dataset.loaded[: len(resumed_items)] == resumed_items  # the first item loaded is batch 5's
    (line,) = [str(w.message) for w in caught]
    assert line.startswith("resume_data: skip: epoch 1 resumes at batch 5 without loading the 5 before it")
    assert "augmentations" in line and "resume_data: replay" in line


def test_replay_loads_the_consumed_batches_again():
    run = build(True, "replay")
    iterator = iter(run)
    next(iterator), next(iterator)
    fresh = build(True, "replay", dataset := Counted())
    fresh.load_state_dict(run.state_dict())
    next(iter(fresh))
    assert len(dataset.loaded) == 9  # two batches replayed, then the third


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def test_skip_over_a_stream_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError) as caught:
        make_loader(DataLoader(Stream(), batch_size=2), batch_size=1, device="cpu", resume_data="skip")
    assert "resume_data: skip needs a map-style dataset" in str(caught.value)
    assert "resume_data: replay" in str(caught.value) and "\n" not in str(caught.value)


class OwnState(DataLoader):
    """A loader that keeps its own position, as torchdata's StatefulDataLoader does (a plain sequence)."""

    def __init__(self, dataset):
        super().__init__(dataset, batch_size=3)
        self.position, self.restored = 0, None

    def __iter__(self):
        batches = list(super().__iter__())
        for batch in batches[self.position :]:
            self.position += 1
            yield batch
        self.position = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position, self.restored = state["position"], state


def test_a_loader_with_its_own_state_is_resumed_by_it():
    run = make_loader(OwnState(Counted()), batch_size=1, device="cpu")
    iterator = iter(run)
    next(iterator), next(iterator)
    state = run.state_dict()
    assert state["loader"] == {"position": 2}
    fresh = make_loader(loader := OwnState(Counted()), batch_size=1, device="cpu", resume_data="skip")
    fresh.load_state_dict(state)
    assert [b[0].tolist() for b in fresh] == [[6, 7, 8], [9, 10, 11], [12, 13, 14], [15, 16, 17], [18, 19]]
    assert loader.restored == {"position": 2}


@pytest.mark.skipif(importlib.util.find_spec("torchdata") is None, reason="torchdata is not installed")
def test_a_stateful_dataloader_resumes_from_its_own_state_without_loading_the_consumed_items():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def stateful(dataset):
        g = torch.Generator().manual_seed(5)
        return make_loader(StatefulDataLoader(dataset, batch_size=3, shuffle=True, generator=g), batch_size=1,
                           device="cpu")  # fmt: skip

    full = order(stateful(Counted()), range(2))
    run = stateful(Counted())
    head = order(run, range(1))
    run.set_epoch(1)
    iterator = iter(run)
    head += [(1, next(iterator)[0].tolist()) for _ in range(4)]
    state = torch.load(_saved(run.state_dict()), weights_only=True)  # as a checkpoint reads it back
    fresh = stateful(dataset := Counted())
    fresh.load_state_dict(state)
    fresh.set_epoch(1)
    tail = [(1, b[0].tolist()) for b in fresh]
    assert head + tail == full
    assert len(dataset.loaded) == sum(len(batch) for _, batch in tail)  # no consumed item loaded again


def _saved(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer
