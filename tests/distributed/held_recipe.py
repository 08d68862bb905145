"""A recipe for the multi-rank resume-logging test (``held_recipe:build``, not collected by pytest): the
``mlp`` recipe, except that with ``options.hold_file=PATH`` rank 0, until PATH exists, pauses
``options.pause`` seconds at the start of step ``options.pause_at``, and at step ``options.hold_at``
creates PATH and waits there until the job is killed (kill -9, as a lost node). A pause longer than the
trackers' hand-over interval (5 s) makes the next logged step hand over every record before it, so the
trackers hold steps logged after the last checkpoint when the job dies; a run that finds PATH (the
resumed one) is the plain recipe."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpulab.engines.torch.recipes import mlp


def build(options: dict):
    options = dict(options)
    hold = options.pop("hold_file", None)
    hold_at, pause_at = int(options.pop("hold_at", 0)), int(options.pop("pause_at", 0))
    pause = float(options.pop("pause", 0.0))
    recipe = mlp.build(options)
    if hold is None or Path(hold).exists() or os.environ.get("RANK") != "0":
        return recipe
    loss_fn, calls = recipe.loss_fn, [0]

    def held_loss(out, target):
        calls[0] += 1  # one call per optimizer step (accumulate 1)
        if calls[0] == hold_at:
            Path(hold).touch()
            while True:  # until killed: the other rank waits in the step's all-reduce
                time.sleep(0.05)
        if calls[0] == pause_at:
            time.sleep(pause)
        return loss_fn(out, target)

    recipe.loss_fn = held_loss
    return recipe
