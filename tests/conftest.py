"""Fixtures shared across the test tree."""

from __future__ import annotations

import os

import pytest
import torch

# Every process a test starts (gloo ranks, CLI runs) prints each thread's Python stack if it dies by a
# signal: a rank aborted by a native library then says where it was, not only "terminate called".
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


@pytest.fixture
def restore_tf32_flags():
    """Put the process-wide TF32 / matmul-precision flags back after a test that may change them."""
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.allow_tf32 = saved[1]
    torch.backends.cudnn.allow_tf32 = saved[2]
