"""DevicePrefetcher and the transfer helpers."""

from collections import OrderedDict, namedtuple

import pytest
import torch

from gpulab.engines.torch.data import DevicePrefetcher, TensorBatches, batch_size_of, make_loader, to_device
from gpulab.errors import DataError

Pair = namedtuple("Pair", "x y")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_to_device_keeps_structure_and_non_tensor_leaves():
    batch = {"pair": Pair(torch.ones(2), [torch.zeros(2), "label"]), "ids": (1, None)}
    moved = to_device(batch, "cpu")
    assert isinstance(moved["pair"], Pair) and moved["pair"].y[1] == "label"
    assert moved["ids"] == (1, None)
    assert moved["pair"].x is batch["pair"].x  # already on the target: no copy
    assert isinstance(to_device(OrderedDict(a=torch.ones(1)), "cpu"), OrderedDict)


def test_batch_size_of_reads_the_first_tensor():
    assert batch_size_of({"meta": "x", "x": torch.zeros(5, 3), "y": torch.zeros(2)}) == 5
    with pytest.raises(DataError, match="no tensor"):
        batch_size_of(["a", 1])


def test_cpu_prefetcher_is_a_pass_through():
    batches = [(torch.randn(3, 2), torch.arange(3)) for _ in range(4)]
    prefetcher = DevicePrefetcher(batches, "cpu")
    assert len(prefetcher) == 4
    out = list(prefetcher)
    assert all(a is b for a, b in zip(out, batches, strict=True))


def test_cpu_prefetcher_over_a_loader_yields_the_same_batches():
    data = (torch.randn(10, 2), torch.arange(10))
    expected = [tuple(b) for b in make_loader(data, batch_size=3, device="cpu", seed=2)]
    got = [tuple(b) for b in DevicePrefetcher(make_loader(data, batch_size=3, device="cpu", seed=2), "cpu")]
    for a, b in zip(expected, got, strict=True):
        assert all(torch.equal(ta, tb) for ta, tb in zip(a, b, strict=True))


@pytest.mark.gpu
@cuda
def test_cuda_prefetcher_moves_batches_in_order():
    batches = [{"x": torch.randn(64, 8), "tag": i} for i in range(5)]
    out = list(DevicePrefetcher(batches, "cuda"))
    torch.cuda.synchronize()
    assert [b["tag"] for b in out] == list(range(5))
    for got, want in zip(out, batches, strict=True):
        assert got["x"].is_cuda and torch.equal(got["x"].cpu(), want["x"])


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("fraction", [0.5, 1e-12], ids=["resident", "pinned-copies"])
def test_cuda_tensor_batches_match_cpu_batches(fraction):
    data = (torch.randn(1000, 16), torch.arange(1000))
    on_gpu = TensorBatches(data, batch_size=64, device="cuda", seed=4, resident_fraction=fraction)
    on_cpu = TensorBatches(data, batch_size=64, device="cpu", seed=4)
    assert on_gpu.resident is (fraction == 0.5)
    for got, want in zip(on_gpu, on_cpu, strict=True):
        assert all(t.is_cuda for t in got)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want, strict=True))
