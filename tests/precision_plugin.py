"""A plugin's precision, added as docs/ARCHITECTURE.md's "How to add a precision" says: ``fp16-unscaled``,
float16 compute without a loss scaler (for a model whose gradients stay inside fp16's range). Its row of
the table is here; the torch engine's class is test_add_a_precision.py's. A plugin registers before the
CLI is built, as test_add_a_precision.py's subprocess does."""

from __future__ import annotations

from gpulab import precisions

# (name, compute dtype, tf32, loss scaling, peak dtype for MFU, Keras policy): an existing dtype, new name
ROW = precisions.PrecisionSpec("fp16-unscaled", "float16", False, False, "fp16", "mixed_float16")


def register() -> None:
    precisions.register_precision(ROW)
