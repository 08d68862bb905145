"""``gpulab inspect``: the run's engine inspects it (engines/<name>/inspect.py); the report types are
``gpulab.measure.inspection``'s."""

from __future__ import annotations

from typing import Any

from gpulab import engine_registry as engines
from gpulab.measure.inspection import InspectReport


def inspect_recipe(user: dict[str, Any]) -> InspectReport:
    """Inspect the run ``user`` describes (the same settings as ``gpulab train``), on its engine."""
    return engines.capability(engines.get(user.pop("engine", None)), "inspect").run(user)
