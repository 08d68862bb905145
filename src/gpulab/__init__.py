"""gpulab: take a PyTorch training job from a laptop CPU to one GPU to many GPUs and nodes."""

from gpulab.config import TrainerSettings
from gpulab.errors import CheckpointError, ConfigError, DataError, DeviceError, GpulabError

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DeviceError",
    "GpulabError",
    "TrainerSettings",
    "__version__",
]
