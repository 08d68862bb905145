"""The TensorFlow engine: the same settings, recipes and outputs as the torch Trainer, on TensorFlow/Keras.

Nothing here imports TensorFlow at import time: ``require_tensorflow`` does, when a fit starts, so torch
users pay nothing and a machine without TensorFlow gets one line saying how to install it.
One concern a file, named as on the torch side: ``engine`` (the ``Engine`` object the verbs ask),
``devices``, ``precision``, ``compile``, ``strategy``, ``data``, ``trainer`` (the loop), ``stop_flag``,
``checkpoints`` (+ ``checkpoint_files``), ``recipes`` (+ ``chargpt_model``), ``run`` (``gpulab train
--engine tensorflow``), ``launch`` (+ ``launch_config``, ``launch_blame``); each verb's TensorFlow part:
``doctor``, ``profile``, ``inspect``, ``export`` (+ ``formats/``), ``bench/``, ``tune`` (+ ``tune_space``).
"""

from gpulab.engines.tensorflow.importing import require_tensorflow
from gpulab.engines.tensorflow.trainer import (  # your own recipe: module:function -> TfRecipe
    TfRecipe,
    TfTrainer,
)

__all__ = ["TfRecipe", "TfTrainer", "require_tensorflow"]
