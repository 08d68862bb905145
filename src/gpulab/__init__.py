"""gpulab: take a PyTorch training job from a laptop CPU to one GPU to many GPUs and nodes.

The public API: ``Runtime`` (device x precision x strategy, used like Lightning Fabric), ``Trainer`` and
its ``FitResult``, ``Recipe``, ``Callback``, ``mean_over_items`` and ``token_cross_entropy`` (torch);
``TfRecipe`` and ``TfTrainer`` (TensorFlow); the settings types and the exceptions
(``tests/test_public_api.py`` freezes the list). The engine-backed names load on first use, so
``gpulab --help`` and ``gpulab doctor`` start fast (and work without torch).
"""

# First, before anything slow: a job's process holds its stop signals from here (early_signals.py).
from gpulab import early_signals as _early_signals

_early_signals.install_for_job()

from gpulab import moved  # noqa: E402
from gpulab.config import RunConfig, TrainerSettings  # noqa: E402
from gpulab.errors import CheckpointError, ConfigError, DataError, DeviceError, GpulabError  # noqa: E402

__version__ = "0.1.0"

_LAZY = {
    "Runtime": "gpulab.engines.torch.runtime",
    "Trainer": "gpulab.engines.torch.train.trainer",
    "FitResult": "gpulab.core.state",
    "Callback": "gpulab.core.callbacks",
    "Recipe": "gpulab.core.recipes.base",
    "TfRecipe": "gpulab.engines.tensorflow.trainer",
    "TfTrainer": "gpulab.engines.tensorflow.trainer",
    "mean_over_items": "gpulab.engines.torch.train.items",
    "token_cross_entropy": "gpulab.engines.torch.train.items",
}

__all__ = [
    "Callback",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DeviceError",
    "FitResult",
    "GpulabError",
    "Recipe",
    "RunConfig",
    "Runtime",
    "TfRecipe",
    "TfTrainer",
    "Trainer",
    "TrainerSettings",
    "__version__",
    "mean_over_items",
    "token_cross_entropy",
]

moved.install()  # old paths the README printed (gpulab.tfengine, gpulab.runtime, ...) import with a warning


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpulab' has no attribute {name!r}")
