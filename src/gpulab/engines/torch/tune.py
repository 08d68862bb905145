"""The torch engine's tune hooks (its ``tuner()``): how it resolves the user's run, which knobs it has and
in what order the search walks them (``tune_space.py``; the batch search runs on the best settings found
before it), and how one trial trains the recipe (the ``Trainer``). The search and the trial
(gpulab/tune/) are engine-neutral: they ask the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from gpulab.engines.torch import tune_space as space
from gpulab.hardware.devices import select_device
from gpulab.measure.knobs import Group, batch_group, precision_group

Search = Any  # tune.search.Search, not imported even for its type: the verb stands above the engine


class TorchTuner:
    name = "torch"
    knobs = space.KNOBS
    compile_guess_s = 30.0  # inductor's first compile of a training step, on a CPU: tens of seconds
    settings_set_only = False  # every setting goes to the Trainer

    def resolve(self, user: dict[str, Any]) -> tuple[Any, Any, torch.device]:
        """(config, recipe, device) of the user's run; seeds first, so the recipe's model is the run's."""
        from gpulab.engines.torch.train.run import resolve_config

        config, recipe = resolve_config(user)
        return config, recipe, torch.device(select_device(config.device).device)

    def groups(
        self, search: Search, config: Any, recipe: Any, device: torch.device, knobs: dict
    ) -> Iterator[Group]:
        """The knobs in walking order. A generator: the batch search runs on the best settings the knobs
        before it found (precision, fused optimizer)."""
        yield precision_group(device, search.default.precision or str(knobs["precision"]))
        yield space.fused_group(bool(knobs.get("fuse_optimizer", True)))
        if config.batch_size == "auto":
            yield Group("batch_size", reason="batch_size: auto already picks the largest that fits")
        else:
            search.largest = search.find_largest(search.best.settings)
            if search.largest is None:
                yield Group("batch_size", reason=search.largest_failed)
            else:
                largest = search.largest
                yield batch_group(int(knobs["batch_size"]), largest["batch_size"], largest["cap"])
        yield space.loader_group(recipe.train_data, device)
        if search.largest is None:
            yield Group("activation_checkpointing", reason="the batch search did not run")
        else:
            binds, largest_b = search.largest["memory_binds"], search.largest["batch_size"]
            yield space.checkpointing_group(recipe.model, binds, largest_b)
        yield space.channels_last_group(recipe.model, device, knobs["channels_last"])
        yield space.compile_group(device)

    def fit(self, config: Any, recipe: Any, settings: dict[str, Any], watch: Any) -> Any:
        from gpulab.engines.torch.train.trainer import Trainer

        trainer = Trainer(trajectory={"recipe": config.recipe}, callbacks=[watch], **settings)
        return recipe.fit(trainer)
