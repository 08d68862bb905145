"""A plugin's strategy, added as docs/ARCHITECTURE.md's "How to add a strategy" says: ``solo``, one process
on one device (torch's ``Single``) that notes each model it sets up, so a test sees the Runtime chose it.
Its row of the table and the torch engine's class; test_add_a_strategy.py registers both."""

from __future__ import annotations

from torch import nn

from gpulab.engines.torch.runtime.strategies.single import Single
from gpulab.precisions import StrategySpec

ROW = StrategySpec("solo", "one device, each model it sets up noted (a test's)")


class Solo(Single):
    name = "solo"
    set_up: list[str] = []  # the class names of the models it moved to its device

    def setup_module(self, model: nn.Module) -> nn.Module:
        Solo.set_up.append(type(model).__name__)
        return super().setup_module(model)
