"""The test tree's NumPy engine (``numpy_engine.py``), registered for a test."""

from __future__ import annotations

import numpy_engine  # (tests/core is on the path)
import pytest

import gpulab.engine_registry


@pytest.fixture
def numpy_registered(monkeypatch):
    """The NumPy engine registered (``engines.register``) until the test ends: its name, its settings and its
    checkpoint layout are then the project's, with no edit outside its own file."""
    monkeypatch.setattr(gpulab.engine_registry, "_REGISTRY", dict(gpulab.engine_registry._REGISTRY))
    gpulab.engine_registry.register(
        numpy_engine.NAME, numpy_engine.__name__, help="NumPy gradient descent (a test's)"
    )
