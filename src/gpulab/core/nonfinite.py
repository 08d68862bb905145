"""A NaN/inf training loss, whichever engine found it.

Each engine detects it its own way without a host sync per step (the torch engine's
``gpulab.engines.torch.train.nonfinite_watch``; the TensorFlow engine's metric read), and raises this same
error so that the CLI, tune and tests treat both alike.
"""

from __future__ import annotations

from gpulab.errors import GpulabError


class NonFiniteLossError(GpulabError):
    """The training loss became NaN or infinite; raised on every rank at the same point."""
