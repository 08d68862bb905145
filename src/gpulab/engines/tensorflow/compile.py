"""``compile`` on TensorFlow: the step as ``tf.function(jit_compile=True)`` (XLA), falling back to a plain
``tf.function`` graph with a warning when XLA cannot compile it (an op without an XLA kernel, no XLA in
this build). Without ``compile`` the step is still a ``tf.function``: eager steps would be far slower."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from gpulab.errors import GpulabWarning


class CompiledStep:
    """Calls the step through XLA until a call fails to compile; from then on, through the plain graph."""

    def __init__(self, tf: Any, fn: Callable, jit: bool) -> None:
        self._tf = tf
        # reduce_retracing: the last window of an epoch (shorter, or a short batch) traces once more, not
        # once per shape.
        self._plain = tf.function(fn, reduce_retracing=True)
        self._xla = tf.function(fn, jit_compile=True, reduce_retracing=True) if jit else None
        self.fell_back = False

    @property
    def compiled(self) -> bool:
        return self._xla is not None and not self.fell_back

    def __call__(self, *args: Any) -> Any:
        if self.compiled:
            try:
                return self._xla(*args)
            except (self._tf.errors.InvalidArgumentError, self._tf.errors.UnimplementedError) as exc:
                # XLA refuses before running anything, so the step has not happened: run it as a graph.
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                warnings.warn(
                    f"XLA could not compile the step ({first}); running it as a plain tf.function",
                    GpulabWarning,
                    stacklevel=2,
                )
                self.fell_back = True
        return self._plain(*args)
