"""make_loader dispatch, its errors, LoaderPolicy, and the DataLoader-backed sources."""

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from gpulab.engines.torch.data import (
    BatchSource,
    DatasetBatches,
    LoaderBatches,
    LoaderPolicy,
    TensorBatches,
    make_loader,
)
from gpulab.errors import ConfigError, DataError


class Squares(Dataset):
    def __len__(self):
        return 9

    def __getitem__(self, index):
        return torch.tensor([float(index)]), torch.tensor(index * index)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(7))


def xy(n=9):
    return torch.randn(n, 2), torch.arange(n)


@pytest.mark.parametrize(
    ("make_data", "kind"),
    [
        (lambda: xy(), TensorBatches),
        (lambda: list(xy()), TensorBatches),
        (lambda: TensorDataset(*xy()), TensorBatches),
        (lambda: Squares(), DatasetBatches),
        (lambda: DataLoader(Squares(), batch_size=4), LoaderBatches),
    ],
    ids=["tuple", "list", "TensorDataset", "Dataset", "DataLoader"],
)
def test_dispatch_by_input_type(make_data, kind):
    source = make_loader(make_data(), batch_size=4, device="cpu")
    assert isinstance(source, kind) and isinstance(source, BatchSource)
    out = list(source)
    assert len(out) == len(source) == 3
    assert sum(len(b[1]) for b in out) == 9


def test_iterable_dataset_needs_shuffle_false():
    source = make_loader(Stream(), batch_size=3, device="cpu", shuffle=False)
    assert isinstance(source, LoaderBatches)
    assert torch.equal(torch.cat(list(source)), torch.arange(7))
    with pytest.raises(DataError, match="shuffle=False"):
        make_loader(Stream(), batch_size=3, device="cpu")


@pytest.mark.parametrize("bad", [42, "data.csv", {1, 2}, torch.zeros(3, 2)])
def test_bad_type_names_the_type_and_the_accepted_ones(bad):
    with pytest.raises(DataError) as info:
        make_loader(bad, batch_size=2, device="cpu")
    message = str(info.value)
    assert type(bad).__name__ in message and "DataLoader" in message and "TensorDataset" in message
    assert "\n" not in message


def test_a_dict_of_tensors_takes_the_fast_path_and_gives_dict_batches():
    x, y = torch.arange(10.0).reshape(5, 2), torch.arange(5)
    as_dict = make_loader({"x": x, "labels": y}, batch_size=2, device="cpu", seed=4)
    as_tuple = make_loader((x, y), batch_size=2, device="cpu", seed=4)
    assert isinstance(as_dict, TensorBatches) and len(as_dict) == 3
    for d, t in zip(as_dict, as_tuple, strict=True):  # the same rows, in the same order, under the names
        assert list(d) == ["x", "labels"]
        assert torch.equal(d["x"], t[0]) and torch.equal(d["labels"], t[1])


def test_a_list_of_dict_samples_is_collated_into_dict_batches():
    samples = [{"x": torch.full((2,), float(i)), "labels": torch.tensor(i)} for i in range(5)]
    batches = list(make_loader(samples, batch_size=2, device="cpu", shuffle=False))
    assert [b["labels"].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert batches[0]["x"].shape == (2, 2)


def test_mismatched_lengths_name_the_lengths():
    with pytest.raises(DataError, match=r"\[5, 4\]"):
        make_loader((torch.zeros(5, 2), torch.zeros(4)), batch_size=2, device="cpu")


def test_non_tensor_in_tuple_and_empty_tuple():
    with pytest.raises(DataError, match=r"data\[1\] is a list"):
        make_loader((torch.zeros(3), [1, 2, 3]), batch_size=2, device="cpu")
    with pytest.raises(DataError, match="empty"):
        make_loader((), batch_size=2, device="cpu")


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_bad_batch_size_is_a_config_error(batch_size):
    with pytest.raises(ConfigError, match="batch_size"):
        make_loader(xy(), batch_size=batch_size, device="cpu")


def test_policy_for_cpu_has_no_pinning_and_no_workers():
    policy = LoaderPolicy.for_device("cpu", physical_cores=16)
    assert policy == LoaderPolicy(False, 0, False, None)
    assert policy.dataloader_kwargs() == {
        "pin_memory": False,
        "num_workers": 0,
        "persistent_workers": False,
        "prefetch_factor": None,
    }


@pytest.mark.parametrize(("cores", "workers"), [(1, 0), (2, 1), (4, 3), (32, 8)])
def test_policy_for_cuda_pins_and_scales_workers_with_cores(cores, workers):
    policy = LoaderPolicy.for_device("cuda", physical_cores=cores)
    assert policy.pin_memory is True and policy.num_workers == workers
    assert policy.persistent_workers is (workers > 0)
    assert policy.prefetch_factor == (2 if workers else None)
    assert LoaderPolicy.for_device(torch.device("cuda", 1), physical_cores=cores) == policy


def test_policy_rejects_impossible_settings():
    with pytest.raises(ConfigError):
        LoaderPolicy(False, 0, True, None)
    with pytest.raises(ConfigError):
        LoaderPolicy(False, 0, False, None, resident_fraction=0)


def test_dataset_path_with_a_worker_resumes_by_index():
    policy = LoaderPolicy(False, 1, True, 2)
    full = [b[1] for b in make_loader(Squares(), batch_size=2, device="cpu", seed=3, policy=policy)]
    run = make_loader(Squares(), batch_size=2, device="cpu", seed=3, policy=policy)
    iterator = iter(run)
    head = [next(iterator)[1] for _ in range(3)]
    fresh = make_loader(Squares(), batch_size=2, device="cpu", seed=3, policy=policy)
    fresh.load_state_dict(run.state_dict())
    tail = [b[1] for b in fresh]
    assert [t.tolist() for t in head + tail] == [t.tolist() for t in full]


def test_user_dataloader_resumes_by_skipping_and_sets_sampler_epoch():
    def build():
        loader = DataLoader(Squares(), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0))
        return make_loader(loader, batch_size=999, device="cpu")

    full = [b[1].tolist() for b in build()]
    run = build()
    iterator = iter(run)
    head = [next(iterator)[1].tolist() for _ in range(2)]
    assert {k: run.state_dict()[k] for k in ("epoch", "batches_consumed")} == {
        "epoch": 0,
        "batches_consumed": 2,
    }
    fresh = build()
    fresh.load_state_dict(run.state_dict())
    assert head + [b[1].tolist() for b in fresh] == full

    class EpochAware(torch.utils.data.SequentialSampler):
        def __init__(self, data):
            super().__init__(data)
            self.epochs = []

        def set_epoch(self, epoch):
            self.epochs.append(epoch)

    sampler = EpochAware(range(9))
    source = make_loader(DataLoader(Squares(), sampler=sampler), batch_size=1, device="cpu")
    source.set_epoch(3)
    list(source)
    assert sampler.epochs == [3]


class WholeStream(IterableDataset):
    """Yields all 12 samples in every worker that runs it."""

    def __iter__(self):
        return iter(torch.arange(12))


class WorkerShards(IterableDataset):
    """Each worker yields every k-th of the 12 samples (k = number of workers)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(torch.arange(12)[start::step])


def _cuda_policy(cores=3):
    """What a CUDA target gets on a 3-core machine (2 workers), without pinning on this CPU-only host."""
    from dataclasses import replace

    policy = LoaderPolicy.for_device("cuda", physical_cores=cores)
    assert policy.num_workers == cores - 1
    return replace(policy, pin_memory=False)


def _one_pass(data, policy):
    source = make_loader(data, batch_size=4, device="cpu", shuffle=False, policy=policy)
    return sorted(torch.cat(list(source)).tolist())


def test_a_stream_that_does_not_shard_by_worker_is_read_once_per_pass_with_one_warning():
    import gpulab.engines.torch.data.loaders as loaders

    loaders._WARNED_STREAMS.discard("WholeStream")
    with pytest.warns(UserWarning, match="WholeStream does not split itself.*get_worker_info") as seen:
        assert _one_pass(WholeStream(), _cuda_policy()) == list(range(12))  # not 2 copies of each
        assert _one_pass(WholeStream(), _cuda_policy()) == list(range(12))
    assert len([w for w in seen if "WholeStream" in str(w.message)]) == 1


def test_a_stream_that_shards_by_worker_keeps_its_workers():
    policy = _cuda_policy()
    assert policy.for_stream(WorkerShards()) is policy
    assert _one_pass(WorkerShards(), policy) == list(range(12))


def test_a_declared_shards_by_worker_attribute_wins_over_the_source():
    class Declared(WholeStream):
        shards_by_worker = True

    class Denied(WorkerShards):
        shards_by_worker = False

    policy = _cuda_policy()
    assert policy.for_stream(Declared()).num_workers == 2
    with pytest.warns(UserWarning, match="Denied does not split itself"):
        fallback = policy.for_stream(Denied())
    assert (fallback.num_workers, fallback.persistent_workers, fallback.prefetch_factor) == (0, False, None)
    assert LoaderPolicy.for_device("cpu").for_stream(WholeStream()).num_workers == 0  # nothing to drop


def test_a_users_loader_settings_override_the_derived_policy():
    cpu = LoaderPolicy.for_device("cpu")
    assert (cpu.num_workers, cpu.pin_memory) == (0, False)
    two = cpu.overridden(num_workers=2, pin_memory=None, prefetch_factor=None)
    assert (two.num_workers, two.persistent_workers, two.prefetch_factor, two.pin_memory) == (
        2,
        True,
        2,
        False,
    )
    cuda = LoaderPolicy.for_device("cuda", physical_cores=4)
    none = cuda.overridden(num_workers=0, pin_memory=False, prefetch_factor=None)
    assert (none.num_workers, none.persistent_workers, none.prefetch_factor, none.pin_memory) == (
        0,
        False,
        None,
        False,
    )
    assert cuda.overridden(num_workers=None, pin_memory=None, prefetch_factor=4).prefetch_factor == 4
