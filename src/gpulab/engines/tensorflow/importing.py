"""TensorFlow, imported only when the engine is used; absent, one line with the pip command."""

from __future__ import annotations

import os
from typing import Any

from gpulab.errors import ConfigError

INSTALL = "pip install 'gpulab[tensorflow]'"


def require_tensorflow() -> Any:
    """The ``tensorflow`` module, or a ConfigError (exit 2) naming the fix."""
    # TensorFlow's C++ start-up chatter (oneDNN notices, CUDA probing) is not the user's business.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ConfigError(
            f"engine 'tensorflow' needs TensorFlow, which is not installed ({exc.name or exc}); "
            f"install it with: {INSTALL} (or use --engine torch)"
        ) from None
    return tf
