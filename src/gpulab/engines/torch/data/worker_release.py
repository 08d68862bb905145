"""Ending a DataLoader's persistent workers when a fit ends, at once, rather than whenever Python's cyclic
garbage collector frees the loader: torch's iterator freed by the collector waits 5 s per worker for workers
that never get its stop message (a 2-worker persistent DataLoader in a reference cycle: 10.3 s in
``gc.collect()``, 0.04 s by reference count; pytorch/pytorch#81794). The collector runs at an arbitrary
allocation, so a run stalled 10 s after its summary, or in whatever the user's script did next."""

from __future__ import annotations

from typing import Any

from gpulab.engines.torch import torch_private


def release_workers(source: Any) -> None:
    """Shut down the persistent workers of ``source``'s DataLoader (a ``DatasetBatches`` or
    ``LoaderBatches``; anything else is left alone). Iterated again, the loader starts new ones."""
    torch_private.shut_down_persistent_workers(getattr(source, "loader", None))
