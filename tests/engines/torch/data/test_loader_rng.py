"""A user's shuffling DataLoader resumes on a fresh object (as in a new process) at the same batch, in any
epoch: the generator states its epoch began from travel with the cursor (data/loader_rng.py)."""

import random
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from gpulab.engines.torch.data import make_loader
from gpulab.errors import CheckpointError, GpulabWarning


class Noisy(Dataset):
    """Index and a random draw from the main process's global streams (an augmentation)."""

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.tensor(index), torch.rand(()) + random.random()


def build(generator: bool, **kwargs):
    """What a user's script builds afresh in every process: the generator is seeded again."""
    g = torch.Generator().manual_seed(5) if generator else None
    return make_loader(DataLoader(Noisy(), batch_size=3, shuffle=True, generator=g, **kwargs), batch_size=1,
                       device="cpu")  # fmt: skip


def epochs(source, n):
    out = []
    for epoch in range(n):
        source.set_epoch(epoch)
        out += [(epoch, b[0].tolist()) for b in source]
    return out


@pytest.mark.parametrize("generator", [True, False], ids=["own-generator", "global-rng"])
@pytest.mark.parametrize("stop_after", [5, 4], ids=["mid-epoch-2", "epoch-boundary"])
def test_resumed_on_a_fresh_loader_gives_the_uninterrupted_order(generator, stop_after):
    torch.manual_seed(0)
    full = epochs(build(generator), 3)  # 4 batches an epoch
    torch.manual_seed(0)
    run = build(generator)
    head = []
    for epoch in range(2):
        run.set_epoch(epoch)
        for batch in run:
            head.append((epoch, batch[0].tolist()))
            if len(head) == stop_after:
                break
        if len(head) == stop_after:
            break
    state, streams = run.state_dict(), torch.get_rng_state()  # what a checkpoint keeps
    torch.manual_seed(123)  # the new process's global stream, until the checkpoint's is restored
    fresh = build(generator)
    fresh.load_state_dict(state)
    torch.set_rng_state(streams)
    tail = []
    for epoch in range(state["epoch"], 3):
        fresh.set_epoch(epoch)
        tail += [(epoch, b[0].tolist()) for b in fresh]
    assert head + tail == full


def test_the_replayed_batches_leave_the_training_streams_as_the_checkpoint_had_them():
    def seeded():
        random.seed(1)
        torch.manual_seed(1)

    run = build(True)
    iterator = iter(run)
    next(iterator), next(iterator)
    state = run.state_dict()
    seeded()  # the streams at the checkpoint
    batch = next(iterator)  # its __getitem__ draws from both streams
    expected = batch, torch.rand(3), random.random()
    seeded()
    fresh = build(True)
    fresh.load_state_dict(state)
    batch = next(iter(fresh))  # two batches replayed first, their draws put back
    assert torch.equal(batch[0], expected[0][0]) and torch.equal(batch[1], expected[0][1])
    assert torch.equal(torch.rand(3), expected[1])
    assert random.random() == expected[2]


def test_a_checkpoint_of_another_loader_is_refused_in_one_line():
    state = build(True).state_dict()
    other = build(False)  # no generator: one fewer to restore
    with pytest.raises(CheckpointError, match="drew from 1 generators and this one draws from 0"):
        other.load_state_dict(state)


class PythonShuffled(torch.utils.data.Sampler):
    """A user's sampler that shuffles with Python's random module (no torch generator)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        order = list(range(self.n))
        random.shuffle(order)
        return iter(order)

    def __len__(self):
        return self.n


def test_a_sampler_drawing_from_pythons_random_resumes_exactly():
    def build_own():
        return make_loader(DataLoader(Noisy(), batch_size=3, sampler=PythonShuffled(10)), batch_size=1,
                           device="cpu")  # fmt: skip

    random.seed(0)
    full = epochs(build_own(), 2)
    random.seed(0)
    run = build_own()
    head = epochs(run, 1)
    iterator = iter(run)
    head.append((1, next(iterator)[0].tolist()))
    state, streams = run.state_dict(), random.getstate()
    random.seed(99)
    fresh = build_own()
    fresh.load_state_dict(state)
    random.setstate(streams)
    assert head + [(1, b[0].tolist()) for b in fresh] == full


class OwnRandom(Noisy):
    """Draws from a generator of its own, which no checkpoint holds."""

    def __init__(self, reseeds=False):
        self.rng = np.random.default_rng(0)
        if reseeds:
            self.set_epoch = lambda epoch: setattr(self, "rng", np.random.default_rng(epoch))


def test_a_dataset_with_its_own_generator_is_one_line_at_the_first_checkpoint():
    source = make_loader(DataLoader(OwnRandom(), batch_size=3), batch_size=1, device="cpu")
    with pytest.warns(GpulabWarning) as caught:
        source.state_dict()
        source.state_dict()
    (line,) = [str(w.message) for w in caught]
    assert "OwnRandom draws from its own generator (OwnRandom.rng)" in line and "set_epoch(epoch)" in line
    reseeded = make_loader(DataLoader(OwnRandom(reseeds=True), batch_size=3), batch_size=1, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", GpulabWarning)
        reseeded.state_dict()
        reseeded.set_epoch(2)
        next(iter(reseeded))
    assert reseeded.loader.dataset.rng.bit_generator.seed_seq.entropy == 2  # told the epoch
