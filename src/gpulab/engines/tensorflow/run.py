"""``gpulab train --engine tensorflow``: recipe + settings -> TfTrainer -> summary.json and the weights.

The run's story is ``gpulab.core.run`` (every engine's: the run directory claimed, a previous run refused
without --overwrite, the same summary.json fields, plus ``engine``). Worker 0 writes the shared files. The
weights are written at the end as ``model.weights.h5`` (atomically, with ``model.weights.manifest.json``);
checkpoints and resume: ``engines/tensorflow/checkpoints.py``. SIGTERM/SIGINT as on torch
(``core/preemption.py``): the step finishes, every worker checkpoints that step, the run names the
checkpoint and ends with ``Preempted`` (exit 128 + N); a second signal ends at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpulab.config.layering import with_defaults
from gpulab.config.schema import RunConfig
from gpulab.config.validate import validated
from gpulab.core.run import RunSteps
from gpulab.core.state import FitResult
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.strategy import tf_config_task
from gpulab.errors import ConfigError

WEIGHTS_FILE = "model.weights.h5"
WEIGHTS_MANIFEST = "model.weights.manifest.json"  # its size and sha256: export verifies it before use


class TensorFlowRun(RunSteps):
    """The TensorFlow engine's part of ``gpulab.core.run.run``."""

    def resolve(self, user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
        return resolve_tf_config(user)

    def rank(self) -> int:
        return tf_config_task()[0]

    def trainer(self, config: RunConfig, callbacks: list[Any]) -> Any:
        from gpulab.engines.tensorflow.trainer import TfTrainer

        trajectory = {"recipe": config.recipe, "options": config.options}
        return TfTrainer(trajectory=trajectory, callbacks=callbacks, settings=config.trainer_settings())

    def fit(self, trainer: Any, recipe: Any, resume: str | None) -> FitResult:
        return trainer.fit(recipe, resume=resume)

    def outputs(self, trainer: Any, recipe: Any, out: Path) -> dict[str, Any]:
        """The weights, written at the end (rank zero) beside the summary, which names them."""
        info = {"parameters": int(trainer.model.count_params()), **recipe.info}
        info["weights"] = str(save_weights(trainer.model, out))
        return info

    def environment(self) -> dict[str, Any]:
        return environment()


def run(user: dict[str, Any] | RunConfig) -> tuple[RunConfig, FitResult, Path | None]:
    """Train as ``user`` says (``gpulab.core.run.run``); the output directory on worker 0, else None."""
    from gpulab.core import run as core_run

    return core_run.run(TensorFlowRun(), user)


def resolve_tf_config(user: dict[str, Any] | RunConfig) -> tuple[RunConfig, Any]:
    """The TensorFlow recipe ``user`` names and its defaults laid under the settings (TensorFlow
    imported): ``user`` validated already (a ``RunConfig``: ``gpulab train``'s) or a dict, validated here
    once, engine checked."""
    from gpulab.engines.tensorflow.recipes import RECIPES, load_tf_recipe

    if not isinstance(user, RunConfig) and not user.get("recipe"):
        raise ConfigError(
            f"no recipe given: name one ({'|'.join(RECIPES)}|module:function) or set 'recipe' in --config"
        )
    # Settings first, so a refused setting or a bad value is told before TensorFlow's import (seconds).
    settings = validated(user)
    require_tensorflow()
    # Seeded before the recipe builds its data: a tf.data shuffle takes TensorFlow's global seed as it is
    # made (unset in a fresh process, the last fit's seed after a fit), so a second fit in one process
    # shuffled otherwise and ended on other weights than the same fit in a fresh one. NumPy and Python
    # alike, as torch's ``resolve_config`` does; the fit seeds again before its model.
    import keras

    keras.utils.set_random_seed(settings.seed)
    recipe = load_tf_recipe(settings.recipe, settings.options)
    config = with_defaults(settings, recipe.defaults)
    if "mfu" not in config.model_fields_set:  # this engine measures no MFU: summary.json says what ran,
        config.mfu = False  # as the checkpoint's meta.json does (a resume taking it was refused)
    return config, recipe


def environment() -> dict[str, Any]:
    """TensorFlow's environment for summary.json and profile reports (no torch imported)."""
    from gpulab.core.summary import environment as core_environment

    tf = require_tensorflow()
    gpus = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None
    return core_environment({"tensorflow": tf.__version__, "keras": tf.keras.__version__}, name)


def save_weights(model: Any, out: Path) -> Path:
    """``out/model.weights.h5``, written to a temporary name, fsync'd and renamed (never half a file), then
    its manifest (size and sha256), which export checks before it reads a byte of the weights."""
    from gpulab.checkpoint.io import fsync_dir, fsync_file, write_files_manifest

    out.mkdir(parents=True, exist_ok=True)
    path = out / WEIGHTS_FILE
    tmp = out / f".tmp-{os.getpid()}.weights.h5"  # Keras wants the .weights.h5 suffix
    model.save_weights(str(tmp))
    fsync_file(tmp)
    tmp.replace(path)
    fsync_dir(out)
    write_files_manifest(out, WEIGHTS_MANIFEST, [WEIGHTS_FILE])
    return path
