"""The TensorFlow engine: the same settings, recipes and outputs as the torch Trainer, on TensorFlow/Keras.

Nothing here imports TensorFlow at import time: ``require_tensorflow`` does, when a fit starts, so torch
users pay nothing and a machine without TensorFlow gets one line saying how to install it.
One concern a file, named as on the torch side: ``engine`` (the ``Engine`` object the verbs ask),
``devices``, ``precision``, ``compile``, ``strategy``, ``data``, ``trainer`` (the loop), ``stop_flag``,
``checkpoints`` (+ ``checkpoint_files``), ``recipes`` (+ ``chargpt_model``), ``run`` (``gpulab train
--engine tensorflow``), ``launch`` (+ ``launch_config``, ``launch_blame``); each verb's TensorFlow part:
``doctor``, ``profile``, ``inspect``, ``export`` (+ ``formats/``), ``bench/``, ``tune`` (+ ``tune_space``).
"""

from typing import Any

from gpulab.engines.tensorflow.importing import require_tensorflow

__all__ = ["TfRecipe", "TfTrainer", "require_tensorflow"]


def __getattr__(name: str) -> Any:
    """``TfRecipe`` and ``TfTrainer`` (your own recipe: module:function -> TfRecipe) load on first use: the
    engine object (engine.py) is asked by config and the doctor, which need none of the trainer."""
    if name in ("TfRecipe", "TfTrainer"):
        from gpulab.engines.tensorflow import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
