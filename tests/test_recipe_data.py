"""The built-in recipes' data is NumPy's (gpulab/recipe_data.py): both engines train on the same samples,
the torch recipes wrap the arrays without a copy, and making the data imports no torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from gpulab import recipe_data
from gpulab.core.recipes.base import load_recipe


def test_making_the_data_imports_no_torch():
    code = (
        "import sys\n"
        "from gpulab import recipe_data as r\n"
        "r.mlp_data(200, 4, 0); r.digits_data(0.2, 0); r.windows(r.chargpt_text({'max_chars': 2000})[2], 16)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_torch_recipes_wrap_the_numpy_samples_without_a_copy():
    x, y = recipe_data.mlp_data(500, 20, 1234)
    recipe = load_recipe("mlp", {"samples": 500})
    tx, ty = recipe.train_data
    np.testing.assert_array_equal(tx.numpy(), x[:400])
    np.testing.assert_array_equal(ty.numpy(), y[:400])
    # train and validation are two cuts of the generated buffer: no copy on the way to torch
    assert recipe.val_data[0].data_ptr() == tx.data_ptr() + tx.numel() * tx.element_size()

    (xt, yt), _ = recipe_data.digits_data(0.2, 0)
    np.testing.assert_array_equal(load_recipe("digits").train_data[0].numpy(), xt)
    np.testing.assert_array_equal(load_recipe("digits").train_data[1].numpy(), yt)


def test_the_same_seed_gives_the_same_samples_and_another_seed_others():
    a, b, c = (recipe_data.mlp_data(300, 5, s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    assert a[0].dtype == np.float32 and a[1].shape == (300, 1) and 0.2 < a[1].mean() < 0.8
