"""Each engine's tune hooks (``engine_for`` asks ``gpulab.engines`` for the user's engine, whose ``tuner()``
is one of these): how it resolves the user's run, which knobs it has and in what order the search walks
them, and how one trial builds and trains the recipe.

The search (``search.py``) and the trial (``trial.py``) are engine-neutral: they ask the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

from gpulab.engines.tensorflow import tune_space as tf_space
from gpulab.engines.torch import tune_space as space
from gpulab.engines.torch.tune_space import Group
from gpulab.hardware.devices import select_device

Search = Any  # tune.search.Search, not imported even for its type: it imports this module


class TorchTuner:
    name = "torch"
    knobs = space.KNOBS
    compile_guess_s = 30.0  # inductor's first compile of a training step, on a CPU: tens of seconds
    settings_set_only = False  # every setting goes to the Trainer

    def resolve(self, user: dict[str, Any]) -> tuple[Any, Any, torch.device]:
        """(config, recipe, device) of the user's run; seeds first, so the recipe's model is the run's."""
        from gpulab.train.run import resolve_config

        config, recipe = resolve_config(user)
        return config, recipe, torch.device(select_device(config.device).device)

    def groups(
        self, search: Search, config: Any, recipe: Any, device: torch.device, knobs: dict
    ) -> Iterator[Group]:
        """The knobs in walking order. A generator: the batch search runs on the best settings the knobs
        before it found (precision, fused optimizer)."""
        yield space.precision_group(device, search.default.precision or str(knobs["precision"]))
        yield space.fused_group(bool(knobs.get("fuse_optimizer", True)))
        if config.batch_size == "auto":
            yield Group("batch_size", reason="batch_size: auto already picks the largest that fits")
        else:
            search.largest = search.find_largest(search.best.settings)
            if search.largest is None:
                yield Group("batch_size", reason=search.largest_failed)
            else:
                largest = search.largest
                yield space.batch_group(int(knobs["batch_size"]), largest["batch_size"], largest["cap"])
        yield space.loader_group(recipe.train_data, device)
        if search.largest is None:
            yield Group("activation_checkpointing", reason="the batch search did not run")
        else:
            binds, largest_b = search.largest["memory_binds"], search.largest["batch_size"]
            yield space.checkpointing_group(recipe.model, binds, largest_b)
        yield space.channels_last_group(recipe.model, device, knobs["channels_last"])
        yield space.compile_group(device)

    def fit(self, config: Any, recipe: Any, settings: dict[str, Any], watch: Any) -> Any:
        from gpulab.train.trainer import Trainer

        trainer = Trainer(trajectory={"recipe": config.recipe}, callbacks=[watch], **settings)
        return recipe.fit(trainer)


class TensorFlowTuner:
    name = "tensorflow"
    knobs = tf_space.KNOBS
    compile_guess_s = 10.0  # XLA's first compile of a step: seconds
    settings_set_only = True  # the engine refuses a torch-only setting a full dump would carry

    def resolve(self, user: dict[str, Any]) -> tuple[Any, Any, torch.device]:
        from gpulab.engines.tensorflow.devices import device_name
        from gpulab.engines.tensorflow.importing import require_tensorflow
        from gpulab.engines.tensorflow.run import resolve_tf_config

        config, recipe = resolve_tf_config(user)  # refuses torch-only settings in one line
        return config, recipe, tf_space.torch_device(device_name(require_tensorflow(), config.device))

    def groups(
        self, search: Search, config: Any, recipe: Any, device: torch.device, knobs: dict
    ) -> Iterator[Group]:
        resolved = search.default.precision or str(knobs["precision"])
        yield from tf_space.groups(config, recipe, device, resolved)

    def fit(self, config: Any, recipe: Any, settings: dict[str, Any], watch: Any) -> Any:
        from gpulab.engines.tensorflow.trainer import TfTrainer

        trainer = TfTrainer(trajectory={"recipe": config.recipe}, callbacks=[watch], **settings)
        # Every trial builds its own step functions from the same code, which TensorFlow's logger reports
        # as "excessive retracing" after a few trials: true of the search, not of the user's run.
        logger = logging.getLogger("tensorflow")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            return trainer.fit(recipe)
        finally:
            logger.setLevel(level)


def engine_for(user: dict[str, Any]) -> TorchTuner | TensorFlowTuner:
    """The tune hooks of the user's engine (torch unless set)."""
    from gpulab import engines

    return engines.of(user).tuner()
