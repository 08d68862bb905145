"""gpulab: take a PyTorch training job from a laptop CPU to one GPU to many GPUs and nodes.

The public API: ``Runtime`` (device x precision x strategy, used like Lightning Fabric), ``Trainer`` and
its ``FitResult``, ``Recipe``, the settings types and the exceptions. The torch-backed names load on first
use, so ``gpulab --help`` and ``gpulab doctor`` start fast (and work without torch).
"""

from gpulab.config import RunConfig, TrainerSettings
from gpulab.errors import CheckpointError, ConfigError, DataError, DeviceError, GpulabError

__version__ = "0.1.0"

_LAZY = {
    "Runtime": "gpulab.engines.torch.runtime",
    "Trainer": "gpulab.engines.torch.train.trainer",
    "FitResult": "gpulab.core.state",
    "Callback": "gpulab.core.callbacks",
    "Recipe": "gpulab.core.recipes.base",
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
    "Trainer",
    "TrainerSettings",
    "__version__",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpulab' has no attribute {name!r}")
