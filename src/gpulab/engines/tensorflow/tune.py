"""The TensorFlow engine's tune hooks (its ``tuner()``): how it resolves the user's run, which knobs it
has and in what order the search walks them (``tune_space.py``), and how one trial trains the recipe
(``TfTrainer``). The search and the trial (gpulab/tune/) are engine-neutral: they ask the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from gpulab.engines.tensorflow import tune_space as tf_space
from gpulab.measure.knobs import DeviceName, Group

Search = Any  # tune.search.Search, not imported even for its type: the verb stands above the engine


class TensorFlowTuner:
    name = "tensorflow"
    knobs = tf_space.KNOBS
    compile_guess_s = 10.0  # XLA's first compile of a step: seconds
    settings_set_only = True  # the engine refuses a torch-only setting a full dump would carry

    def out_of_memory(self, exc: BaseException) -> str | None:
        """A trial's failure as the reason tune.json gives, where it is TensorFlow's out-of-memory error
        (by its name: TensorFlow is not imported to ask)."""
        if type(exc).__name__ != "ResourceExhaustedError":
            return None
        return f"does not fit: out of memory ({(str(exc).strip().splitlines() or [''])[0][:200]})"

    def resolve(self, user: dict[str, Any]) -> tuple[Any, Any, DeviceName]:
        from gpulab.engines.tensorflow.devices import device_name
        from gpulab.engines.tensorflow.importing import require_tensorflow
        from gpulab.engines.tensorflow.run import resolve_tf_config

        config, recipe = resolve_tf_config(user)  # refuses torch-only settings in one line
        return config, recipe, tf_space.torch_device(device_name(require_tensorflow(), config.device))

    def groups(
        self, search: Search, config: Any, recipe: Any, device: DeviceName, knobs: dict
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
