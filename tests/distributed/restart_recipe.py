"""A recipe for the restart test (``restart_recipe:build``, not collected by pytest): the ``mlp`` recipe,
except that with ``options.exit_after_step=N`` rank 1 of the *first* attempt of a torchrun job exits at
once (``os._exit``) when it starts step N+1 -- after step N's checkpoint was written, mid-run."""

from __future__ import annotations

import os

from gpulab.engines.torch.recipes import mlp


def build(options: dict):
    options = dict(options)
    exit_after = int(options.pop("exit_after_step", 0))
    recipe = mlp.build(options)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0" and os.environ.get("RANK") == "1"
    if exit_after and first_attempt:
        loss_fn, calls = recipe.loss_fn, [0]

        def dying_loss(out, target):
            calls[0] += 1  # one call per optimizer step (accumulate 1)
            if calls[0] == exit_after + 1:
                os._exit(3)
            return loss_fn(out, target)

        recipe.loss_fn = dying_loss
    return recipe
