"""Recipes on any engine: ``base`` (the ``Recipe`` a torch recipe hands the Trainer; ``load_recipe`` and
``call_user_recipe``, which find a built-in by name or import a user's ``module:function``) and ``trust``
(whether a recipe a file names may be imported). The built-in recipes are each engine's own:
``gpulab.engines.torch.recipes``, ``gpulab.engines.tensorflow.recipes``."""
