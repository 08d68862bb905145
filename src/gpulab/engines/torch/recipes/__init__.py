"""The torch engine's built-in recipes (mlp, digits, chargpt), each a ``build(options) -> Recipe`` loaded by
name through ``gpulab.core.recipes.base.load_recipe``; their data is ``gpulab.recipe_data``'s NumPy arrays."""
