"""The README's own-recipe example (`my_recipe.py`) trains: in its default epoch its training loss ends far
below the untrained model's, and it validates (a recipe without validation data cannot be exported with a
parity check, which the README's export example does next)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

from gpulab.engines.torch.train.run import run

README = Path(__file__).parents[1] / "README.md"


def test_the_readme_recipe_trains_to_a_lower_loss_than_it_starts(tmp_path, monkeypatch):
    text = README.read_text()
    start = text.index("```python\n# my_recipe.py") + len("```python\n")
    (tmp_path / "my_recipe.py").write_text(text[start : text.index("```", start)])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("my_recipe", None)
    recipe = importlib.import_module("my_recipe").build({"width": 64})
    x, y = recipe.train_data
    with torch.no_grad():
        untrained = torch.nn.functional.mse_loss(recipe.model(x), y).item()

    _, result, _ = run(
        {"recipe": "my_recipe:build", "options": {"width": 64}, "progress": False, "mfu": False}
    )
    assert result.epochs == 1 and result.val_loss is not None  # the default epoch, validated
    assert result.final_loss < untrained / 10 and result.val_loss < untrained / 10, (untrained, result)
