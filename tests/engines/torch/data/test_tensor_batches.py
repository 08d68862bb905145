"""The fast path: index-tensor batching, its order, and exact mid-epoch resume."""

import pytest
import torch
from torch.utils.data import Dataset

from gpulab.engines.torch.data import LoaderPolicy, TensorBatches, epoch_permutation, make_loader
from gpulab.errors import CheckpointError

N, BATCH = 10, 4


class RowDataset(Dataset):
    """A map-style dataset that is *not* a TensorDataset, so make_loader takes the DataLoader path."""

    def __init__(self, *tensors):
        self.tensors = tensors

    def __len__(self):
        return len(self.tensors[0])

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)


def data(n=N):
    x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    y = torch.arange(n)
    return x, y


def batches(source):
    return [tuple(b) for b in source]


def assert_same(left, right):
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        assert len(a) == len(b)
        for ta, tb in zip(a, b, strict=True):
            assert torch.equal(ta, tb)


def test_shapes_last_partial_batch_and_len():
    source = TensorBatches(data(), batch_size=BATCH, device="cpu", shuffle=False)
    out = list(source)
    assert len(source) == len(out) == 3
    assert [tuple(x.shape) for x, _ in out] == [(4, 3), (4, 3), (2, 3)]
    assert torch.equal(torch.cat([y for _, y in out]), torch.arange(N))


def test_drop_last_drops_the_partial_batch():
    source = TensorBatches(data(), batch_size=BATCH, device="cpu", drop_last=True)
    out = list(source)
    assert len(source) == len(out) == 2
    assert all(x.shape == (4, 3) for x, _ in out)


def test_in_order_batches_are_views_not_copies():
    x, y = data()
    first_x, first_y = next(iter(TensorBatches((x, y), batch_size=BATCH, device="cpu", shuffle=False)))
    assert first_x.data_ptr() == x.data_ptr() and first_y.data_ptr() == y.data_ptr()


def test_every_sample_once_per_epoch():
    source = TensorBatches(data(), batch_size=3, device="cpu", seed=7)
    for epoch in range(3):
        source.set_epoch(epoch)
        seen = torch.cat([y for _, y in source])
        assert sorted(seen.tolist()) == list(range(N))


def test_epochs_differ_and_repeat_for_same_seed_and_epoch():
    def order(seed, epoch):
        source = TensorBatches(data(), batch_size=BATCH, device="cpu", seed=seed)
        source.set_epoch(epoch)
        return torch.cat([y for _, y in source]).tolist()

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1)
    assert order(3, 2) == order(3, 2)
    assert order(0, 1) == epoch_permutation(N, 0, 1).tolist()


def test_finishing_an_epoch_moves_to_the_next():
    source = TensorBatches(data(), batch_size=BATCH, device="cpu")
    first = torch.cat([y for _, y in source])
    assert source.state_dict() == {"epoch": 1, "batches_consumed": 0}
    second = torch.cat([y for _, y in source])
    assert second.tolist() == epoch_permutation(N, 0, 1).tolist() != first.tolist()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_fast_path_equals_dataloader_path(shuffle, drop_last):
    policy = LoaderPolicy.for_device("cpu")
    kwargs = dict(batch_size=3, device="cpu", shuffle=shuffle, drop_last=drop_last, seed=5, policy=policy)
    fast = make_loader(data(), **kwargs)
    slow = make_loader(RowDataset(*data()), **kwargs)
    assert type(fast).__name__ == "TensorBatches" and type(slow).__name__ == "DatasetBatches"
    assert len(fast) == len(slow)
    for epoch in range(3):
        fast.set_epoch(epoch)
        slow.set_epoch(epoch)
        assert_same(batches(fast), batches(slow))


@pytest.mark.parametrize("path", ["fast", "dataloader"])
def test_resume_mid_epoch_from_a_fresh_object(path):
    def build():
        source = data() if path == "fast" else RowDataset(*data())
        return make_loader(source, batch_size=3, device="cpu", seed=1)

    reference = build()
    reference.set_epoch(2)
    full = batches(reference)

    run = build()
    run.set_epoch(2)
    iterator = iter(run)
    done = [tuple(next(iterator)) for _ in range(2)]
    state = run.state_dict()
    assert state == {"epoch": 2, "batches_consumed": 2}

    fresh = build()
    fresh.load_state_dict(state)
    fresh.set_epoch(2)  # a loop calling set_epoch each epoch must not restart the restored epoch
    assert_same(done + batches(fresh), full)
    assert fresh.state_dict() == {"epoch": 3, "batches_consumed": 0}


def test_state_after_last_batch_names_next_epoch():
    source = TensorBatches(data(), batch_size=BATCH, device="cpu")
    for _ in source:
        last_state = source.state_dict()
    assert last_state == {"epoch": 1, "batches_consumed": 0}


def test_set_epoch_to_another_epoch_restarts_it():
    source = TensorBatches(data(), batch_size=BATCH, device="cpu")
    next(iter(source))
    source.set_epoch(4)
    assert source.state_dict() == {"epoch": 4, "batches_consumed": 0}
    assert len(list(source)) == len(source)


@pytest.mark.parametrize(
    "state", [{"epoch": 0}, {"epoch": 0, "batches_consumed": 99}, {"epoch": -1, "batches_consumed": 0}]
)
def test_bad_state_is_a_checkpoint_error(state):
    source = TensorBatches(data(), batch_size=BATCH, device="cpu")
    with pytest.raises(CheckpointError, match="loader state"):
        source.load_state_dict(state)


def test_empty_epoch_still_advances():
    source = TensorBatches(data(2), batch_size=BATCH, device="cpu", drop_last=True)
    assert len(source) == 0 and list(source) == []
    assert source.state_dict() == {"epoch": 1, "batches_consumed": 0}


def test_shuffled_batches_are_views_of_one_epoch_copy():
    x, y = data(12)
    source = TensorBatches((x, y), batch_size=BATCH, device="cpu", seed=3)
    assert source.epoch_copy
    out = list(source)
    # Every batch of the epoch lives in one storage (the epoch's gathered copy), not in x itself.
    storages = {bx.untyped_storage().data_ptr() for bx, _ in out}
    assert len(storages) == 1 and x.untyped_storage().data_ptr() not in storages
    assert torch.cat([by for _, by in out]).tolist() == epoch_permutation(12, 3, 0).tolist()


@pytest.mark.parametrize("world_size", [1, 3])
def test_epoch_copy_and_per_batch_gather_give_the_same_batches(monkeypatch, world_size):
    def epochs(source):
        out = []
        for epoch in range(2):
            source.set_epoch(epoch)
            out += batches(source)
        return out

    def build(rank):
        return TensorBatches(data(11), batch_size=2, device="cpu", seed=9, rank=rank, world_size=world_size)

    copied = [epochs(build(rank)) for rank in range(world_size)]
    # No room for a second copy (as on a nearly full GPU): each batch is gathered instead.
    monkeypatch.setattr(
        "gpulab.engines.torch.data.tensor_batches.room_for_copy", lambda tensors, fraction: False
    )
    gathered_sources = [build(rank) for rank in range(world_size)]
    assert not any(s.epoch_copy for s in gathered_sources)
    for rank, source in enumerate(gathered_sources):
        assert_same(copied[rank], epochs(source))
