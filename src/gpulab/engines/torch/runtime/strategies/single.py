"""``Single``: one process, one device; every collective is the identity (the base class's defaults)."""

from __future__ import annotations

from gpulab.engines.torch.runtime.strategies.base import Strategy


class Single(Strategy):
    """One process on one device."""

    name = "single"
