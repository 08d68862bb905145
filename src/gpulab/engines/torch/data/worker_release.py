"""Ending a DataLoader's persistent workers when a fit ends, at once, rather than whenever Python's cyclic
garbage collector frees the loader: torch's iterator freed by the collector waits 5 s per worker for workers
that never get its stop message (a 2-worker persistent DataLoader in a reference cycle: 10.3 s in
``gc.collect()``, 0.04 s by reference count; pytorch/pytorch#81794). The collector runs at an arbitrary
allocation, so a run stalled 10 s after its summary, or in whatever the user's script did next."""

from __future__ import annotations

from typing import Any


def release_workers(source: Any) -> None:
    """Shut down the persistent workers of ``source``'s DataLoader (a ``DatasetBatches`` or
    ``LoaderBatches``; anything else is left alone). Iterated again, the loader starts new ones."""
    loader = getattr(source, "loader", None)
    iterator = getattr(loader, "_iterator", None)  # torch keeps a persistent loader's iterator there
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        loader._iterator = None
        shutdown()
