"""How training data reaches the device fast: loaders, the tensor fast path, prefetching, transfers."""

from gpulab.engines.torch.data.loaders import (
    BatchSource,
    DatasetBatches,
    EpochSampler,
    LoaderBatches,
    LoaderPolicy,
    make_loader,
    usable_physical_cores,
)
from gpulab.engines.torch.data.prefetch import DevicePrefetcher
from gpulab.engines.torch.data.streams import is_stream, stop_together
from gpulab.engines.torch.data.tensor_batches import (
    EpochCursor,
    TensorBatches,
    epoch_permutation,
    len_or_none,
)
from gpulab.engines.torch.data.transfer import batch_size_of, to_device

__all__ = [
    "BatchSource",
    "DatasetBatches",
    "DevicePrefetcher",
    "EpochCursor",
    "EpochSampler",
    "LoaderBatches",
    "LoaderPolicy",
    "TensorBatches",
    "batch_size_of",
    "epoch_permutation",
    "is_stream",
    "len_or_none",
    "make_loader",
    "stop_together",
    "to_device",
    "usable_physical_cores",
]
