"""``gpulab train --engine tensorflow``: recipe + settings -> TfTrainer -> summary.json and the weights.

The same run directory rules as torch's run (claimed, a previous run refused without --overwrite) and the
same summary.json fields (plus ``engine``). Worker 0 writes the shared files. The weights are written at
the end as ``model.weights.h5`` (atomically); checkpoints and resume: ``engines/tensorflow/checkpoints.py``.
SIGTERM/SIGINT as on torch (``train/preemption.py``): the step finishes, every worker checkpoints that
step, the run names the checkpoint and ends with ``Preempted`` (exit 128 + N); a second signal ends at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpulab.config import RunConfig, check_engine, merge, parse_config
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.strategy import tf_config_task
from gpulab.errors import ConfigError
from gpulab.train.state import FitResult

WEIGHTS_FILE = "model.weights.h5"


def run(user: dict[str, Any]) -> tuple[RunConfig, FitResult, Path | None]:
    from gpulab.engines.tensorflow.trainer import TfTrainer
    from gpulab.train.callbacks.preemption import StopOnSignal
    from gpulab.train.preemption import SignalWatch, preempted_error
    from gpulab.train.run import write_summary
    from gpulab.train.run_dir import check_output_dirs, claim, prepare

    config, recipe = resolve_tf_config(user)
    out = Path(config.out_dir or f"runs/{config.recipe}")
    check_output_dirs(out, config.checkpoint_dir)
    rank, _ = tf_config_task()
    with claim(out, rank=rank), SignalWatch() as signals:
        if rank == 0:
            prepare(out, config.checkpoint_dir, config.resume, config.overwrite)
        settings = config.model_dump(exclude_unset=True, exclude={"recipe", "options", "resume", "overwrite"})
        trainer = TfTrainer(
            trajectory={"recipe": config.recipe, "options": config.options},
            callbacks=[StopOnSignal(signals)],
            **settings,
        )
        result = trainer.fit(recipe, resume=config.resume)
        if "preempted" in result.extras:  # no summary or weights file: the run is not finished
            raise preempted_error(result.extras["preempted"], trainer.is_rank_zero)
        if not trainer.is_rank_zero:
            return config, result, None
        if "nothing_to_do" in result.extras:  # a finished run resumed: its files stay as they were
            return config, result, out
        info = {"parameters": int(trainer.model.count_params()), **recipe.info}
        info["weights"] = str(save_weights(trainer.model, out))
        write_summary(out, config, result, info)
    return config, result, out


def resolve_tf_config(user: dict[str, Any]) -> tuple[RunConfig, Any]:
    """The TensorFlow recipe named in ``user`` and the merged, validated settings (TensorFlow imported)."""
    from gpulab.engines.tensorflow.recipes import RECIPES, load_tf_recipe

    if not user.get("recipe"):
        raise ConfigError(
            f"no recipe given: name one ({'|'.join(RECIPES)}|module:function) or set 'recipe' in --config"
        )
    # Settings first, so a refused setting or a bad value is told before TensorFlow's import (seconds).
    check_engine(parse_config(RunConfig, user))
    require_tensorflow()
    recipe = load_tf_recipe(user["recipe"], user.get("options"))
    return parse_config(RunConfig, merge(recipe.defaults, user)), recipe


def save_weights(model: Any, out: Path) -> Path:
    """``out/model.weights.h5``, written to a temporary name and renamed: never half a file."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / WEIGHTS_FILE
    tmp = out / f".tmp-{os.getpid()}.weights.h5"  # Keras wants the .weights.h5 suffix
    model.save_weights(str(tmp))
    tmp.replace(path)
    return path
