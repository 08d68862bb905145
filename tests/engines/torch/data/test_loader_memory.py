"""``loader_memory``: what the Trainer's loader keeps on the device beside the step (inspect's estimate adds
it), decided as ``make_loader`` decides; the GPU's answers through the device seam with a fake torch.cuda."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset

from gpulab.engines.torch import devices
from gpulab.engines.torch.data.loaders import LoaderMemory, LoaderPolicy, loader_memory, make_loader
from gpulab.engines.torch.devices import CudaAccelerator

X, Y = torch.zeros(1000, 16), torch.zeros(1000, dtype=torch.long)
BYTES = 1000 * 16 * 4 + 1000 * 8


class Samples(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        return torch.zeros(4), 0


class FreeGpu:
    """torch.cuda as the seam asks it: one GPU with 60 of 80 GB free."""

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def mem_get_info(self, device):
        return 60 * 10**9, 80 * 10**9


def _fake_gpu(monkeypatch) -> None:
    real = devices._for
    monkeypatch.setattr(devices, "_SEEN", {})  # forget the real seams already asked for
    monkeypatch.setattr(
        devices,
        "_for",
        lambda name: CudaAccelerator(name, cuda=FreeGpu()) if name.startswith("cuda") else real(name),
    )


def test_on_the_cpu_the_fast_path_holds_the_epochs_shuffled_copy():
    assert loader_memory((X, Y), "cpu") == LoaderMemory(BYTES, 0)
    assert loader_memory({"x": X, "y": Y}, "cpu") == LoaderMemory(BYTES, 0)
    assert loader_memory(TensorDataset(X, Y), "cpu", shuffle=False) == LoaderMemory(0, 0)  # views of the data


def test_the_figure_is_what_the_loader_really_allocates_on_the_cpu():
    source = make_loader((X, Y), batch_size=100, device="cpu", shuffle=True)
    first = next(iter(source))
    base = first[0].untyped_storage().nbytes() + first[1].untyped_storage().nbytes()
    assert base == loader_memory((X, Y), "cpu").resident_bytes  # batches are views of the epoch's copy


def test_a_dataset_through_a_dataloader_holds_only_batches():
    assert loader_memory(Samples(), "cpu") == LoaderMemory(0, 0)


def test_on_a_gpu_the_dataset_is_copied_there_and_the_prefetcher_keeps_a_batch_in_flight(monkeypatch):
    _fake_gpu(monkeypatch)
    assert loader_memory((X, Y), "cuda") == LoaderMemory(2 * BYTES, 0)  # the data there + the epoch's copy
    assert loader_memory((X, Y), "cuda:0", shuffle=False) == LoaderMemory(BYTES, 0)
    assert loader_memory(Samples(), "cuda") == LoaderMemory(0, 1)
    tight = LoaderPolicy(pin_memory=True, num_workers=0, persistent_workers=False, prefetch_factor=None,
                         resident_fraction=BYTES / (60 * 10**9) / 2)  # fmt: skip
    assert loader_memory((X, Y), "cuda", policy=tight) == LoaderMemory(0, 1)  # not resident: batches stream
