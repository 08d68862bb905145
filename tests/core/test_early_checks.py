"""Which engines' recipes the early checks know is each engine's word in the registry (``recipe_data``),
not a list in core: a registered engine that declares it has its built-in recipes' options checked before
any framework loads, one that does not has its recipes left to itself."""

from __future__ import annotations

import numpy_engine  # (tests/core is on the path)
import pytest

from gpulab import engine_registry as engines
from gpulab.config import RunConfig
from gpulab.core.early_checks import check_before_framework
from gpulab.errors import ConfigError


def test_the_built_in_engines_declare_that_they_train_recipe_datas_recipes():
    assert [engines.builds_recipe_data(name) for name in ("torch", "tensorflow", None)] == [True] * 3
    assert not engines.builds_recipe_data("nope")
    assert not engines.builds_recipe_data(["torch"])  # --set engine=[torch]: config says what is wrong


@pytest.mark.parametrize("recipe_data", [False, True])
def test_an_engine_declares_whether_recipe_datas_options_are_checked_early(monkeypatch, recipe_data):
    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))
    engines.register("beads", numpy_engine.__name__, help="a test's", recipe_data=recipe_data)
    user = {"recipe": "mlp", "engine": "beads", "options": {"sample": 8}}
    if recipe_data:
        with pytest.raises(ConfigError, match=r"unknown setting .options.sample.; valid settings: samples\|"):
            check_before_framework(user)
    else:  # the engine's own mlp, if it has one, checks its options when it builds it
        settings = check_before_framework(user)
        assert isinstance(settings, RunConfig) and settings.options == {"sample": 8}
