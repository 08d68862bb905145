"""Seeding every random number generator a training run touches, in one call."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and every CUDA device); returns ``seed``.

    ``deterministic=True`` also asks torch for deterministic kernels, warning (not failing) where an op
    has none, and turns off cuDNN autotuning, which picks kernels by timing. ``False`` leaves those
    flags as they are rather than resetting them.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)  # NumPy only takes 0 <= seed < 2**32
    torch.manual_seed(seed)
    # torch.manual_seed already seeds CUDA; saying it again keeps working if that ever changes, and is
    # lazy, so it neither initialises CUDA nor fails without it.
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        use_deterministic_algorithms()
    return seed


def use_deterministic_algorithms() -> None:
    """Make GPU kernels repeatable, at some speed cost."""
    # cuBLAS is only deterministic with a fixed workspace; it reads this when its handle is created,
    # so it must be set before the first CUDA matmul. A user's own setting wins.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
