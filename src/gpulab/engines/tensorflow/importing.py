"""TensorFlow, imported only when the engine is used; absent, one line with the pip command."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from gpulab.errors import ConfigError

INSTALL = "pip install 'gpulab[tensorflow]'"
# What TensorFlow's C++ writes to the stderr file before its logging is set up, whatever
# TF_CPP_MIN_LOG_LEVEL says, once per library that links it: the same oneDNN notice twice a start
START_UP_LINES = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
)


def require_tensorflow() -> Any:
    """The ``tensorflow`` module, or a ConfigError (exit 2) naming the fix."""
    # TensorFlow's C++ start-up chatter (oneDNN notices, CUDA probing) is not the user's business.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with _start_up_lines_held():
            import tensorflow as tf
    except ImportError as exc:
        raise ConfigError(
            f"engine 'tensorflow' needs TensorFlow, which is not installed ({exc.name or exc}); "
            f"install it with: {INSTALL} (or use --engine torch)"
        ) from None
    return tf


@contextlib.contextmanager
def _start_up_lines_held() -> Iterator[None]:
    """The stderr file held while TensorFlow first loads; what it wrote there goes back to stderr without
    ``START_UP_LINES`` (written below Python, so only the file descriptor catches them)."""
    if "tensorflow" in sys.modules:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr file to hold
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not any(part in line for part in START_UP_LINES)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
