"""The trust rule itself (``core/recipes/trust.py``): which recipe a file names may be imported."""

from __future__ import annotations

import pytest

from gpulab.core.recipes.trust import RecipeTrust, UntrustedRecipeError, check_recorded

SOURCE = "run/checkpoints/step-00000008/state.pt"


@pytest.mark.parametrize("name", ["mlp", "digits", "chargpt"])
def test_a_built_in_recipe_needs_no_word(name):
    assert check_recorded(name, SOURCE, RecipeTrust()) == name


def test_code_a_file_names_is_refused_in_one_line_naming_the_module():
    with pytest.raises(UntrustedRecipeError) as refused:
        check_recorded("logging.config:dictConfig", SOURCE, RecipeTrust())
    assert str(refused.value) == (
        f"refused: {SOURCE} names recipe 'logging.config:dictConfig' (imports module 'logging.config' and "
        "calls dictConfig(options)); gpulab runs code a file names only if you repeat it "
        "(--recipe logging.config:dictConfig) or pass --trust-recipe"
    )
    assert refused.value.exit_code == 2


def test_the_users_word_repeated_or_trust_lets_it_through():
    name = "my_recipe:build"
    assert check_recorded(name, SOURCE, RecipeTrust(named=name)) == name
    assert check_recorded(name, SOURCE, RecipeTrust(trust_all=True)) == name


def test_a_recipe_flag_that_differs_is_refused_even_with_trust():
    for trust in (RecipeTrust(named="other:build"), RecipeTrust(named="other:build", trust_all=True)):
        with pytest.raises(UntrustedRecipeError, match="--recipe 'other:build' differs from the recipe"):
            check_recorded("my_recipe:build", SOURCE, trust)
    with pytest.raises(UntrustedRecipeError, match="differs"):
        check_recorded("digits", SOURCE, RecipeTrust(named="mlp"))
