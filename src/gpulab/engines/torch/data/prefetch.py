"""Overlap host->device copies with compute.

Without this, step i+1 starts with a copy the GPU has to wait for. ``DevicePrefetcher`` issues batch
i+1's copy on a side CUDA stream before handing batch i to the caller, so the copy runs while batch i
computes. It only overlaps when the host tensors are pinned (``LoaderPolicy.pin_memory``); from pageable
memory the driver stages the copy synchronously.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from gpulab.engines.torch.data.transfer import (
    DeviceLike,
    is_on_device,
    iter_tensors,
    resolve_device,
    to_device,
)
from gpulab.engines.torch.devices import accelerator


class DevicePrefetcher:
    """Iterate ``iterable`` with each batch moved to ``device``, one batch copied ahead on CUDA.

    On a CPU target batches pass through untouched (they are already in host memory); on another
    non-CUDA accelerator they are moved synchronously. A batch already on the target device is yielded
    as is, with no stream work.
    """

    def __init__(self, iterable: Iterable[Any], device: DeviceLike, lookahead: bool = True) -> None:
        self.iterable = iterable
        self.lookahead = lookahead  # False: each batch is taken from ``iterable`` only when it is handed out
        self.device = resolve_device(device)
        self.accelerator = accelerator(self.device)

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if self.accelerator.is_host:
            return iter(self.iterable)
        if not self.accelerator.streams or not self.lookahead:
            return (to_device(batch, self.device) for batch in self.iterable)
        return self._cuda_iter()

    def _cuda_iter(self) -> Iterator[Any]:
        side = torch.cuda.Stream(self.device)
        compute = torch.cuda.current_stream(self.device)
        source = iter(self.iterable)
        pending = self._start_copy(next(source, _END), side)
        while pending is not _END:
            batch, copied = pending
            if copied:
                # The copy was queued on `side`; kernels queued on `compute` from now on must not read
                # the batch before it has landed. This is a GPU-side wait: the host does not block.
                compute.wait_stream(side)
                # The batch's memory was allocated on `side`, so the caching allocator would consider
                # it free for `side` as soon as the Python tensor dies, even while `compute` kernels
                # still read it. Recording `compute` makes the allocator wait for those kernels too.
                for tensor in iter_tensors(batch):
                    if tensor.is_cuda:
                        tensor.record_stream(compute)
            # Queue the next copy *before* yielding, so it overlaps with the caller's work on `batch`.
            pending = self._start_copy(next(source, _END), side)
            yield batch

    def _start_copy(self, raw: Any, side: torch.cuda.Stream) -> Any:
        """``(batch on device, whether a copy was queued)``, or ``_END``."""
        if raw is _END:
            return _END
        if is_on_device(raw, self.device):  # already resident: no copy, no stream bookkeeping
            return raw, False
        with torch.cuda.stream(side):
            return to_device(raw, self.device, non_blocking=True), True


_END = object()  # sentinel: `None` may be a legitimate batch
