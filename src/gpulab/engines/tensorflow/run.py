"""``gpulab train --engine tensorflow``: recipe + settings -> TfTrainer -> summary.json and the weights.

The same run directory rules as torch's run (claimed, a previous run refused without --overwrite) and the
same summary.json fields (plus ``engine``). Worker 0 writes the shared files. The weights are written at
the end as ``model.weights.h5`` (atomically, with ``model.weights.manifest.json``); checkpoints and
resume: ``engines/tensorflow/checkpoints.py``. SIGTERM/SIGINT as on torch (``core/preemption.py``): the
step finishes, every worker checkpoints that step, the run names the checkpoint and ends with ``Preempted``
(exit 128 + N); a second signal ends at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpulab.config import RunConfig, check_engine, merge, parse_config
from gpulab.core.state import FitResult
from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.strategy import tf_config_task
from gpulab.errors import ConfigError

WEIGHTS_FILE = "model.weights.h5"
WEIGHTS_MANIFEST = "model.weights.manifest.json"  # its size and sha256: export verifies it before use


def run(user: dict[str, Any]) -> tuple[RunConfig, FitResult, Path | None]:
    from gpulab.core.callbacks.preemption import StopOnSignal
    from gpulab.core.callbacks.trackers import attach_files
    from gpulab.core.preemption import SignalWatch, preempted_error
    from gpulab.core.recorded import with_recorded_settings
    from gpulab.core.run_dir import check_output_dirs, checkpoint_root, claim, prepare
    from gpulab.core.summary import run_files, write_summary
    from gpulab.engines.tensorflow.trainer import TfTrainer

    config, recipe = resolve_tf_config(with_recorded_settings(user))
    out = Path(config.out_dir or f"runs/{config.recipe}")
    check_output_dirs(out, config.checkpoint_dir)
    rank, _ = tf_config_task()
    started = checkpoint_root(out, config.checkpoint_dir).is_dir()  # before the lock makes it
    with claim(out, rank, config.checkpoint_dir), SignalWatch() as signals:
        if rank == 0:
            prepare(out, config.checkpoint_dir, config.resume, config.overwrite, started)
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
        write_summary(out, config, result, info, environment())
        attach_files(trainer.callbacks, run_files(out))
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
    config = parse_config(RunConfig, merge(recipe.defaults, user))
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
