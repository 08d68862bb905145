"""Runtime = device x Precision x Strategy: the low-level way to run a training loop anywhere."""

from gpulab.engines.torch.runtime.precision import PRECISIONS, Precision, resolve_precision
from gpulab.engines.torch.runtime.runtime import Runtime
from gpulab.engines.torch.runtime.seed import seed_everything
from gpulab.engines.torch.runtime.strategies import STRATEGIES, Single, Strategy, resolve_strategy

__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "Precision",
    "Runtime",
    "Single",
    "Strategy",
    "resolve_precision",
    "resolve_strategy",
    "seed_everything",
]
