"""The TensorFlow side of ``gpulab bench``: the matmul, precision, memory, accumulate and compile suites on
TensorFlow, run in a process of their own (``worker``) so that TensorFlow's threads, allocator and start-up
never touch the torch suites' figures. Nothing here imports TensorFlow at module level.

``TF_SUITES`` names the suites that have a TensorFlow side (module
``gpulab.engines.tensorflow.bench.<name>``); rows use the torch suites' keys, so the report pairs each
TensorFlow row with the torch row of the same workload.
"""

from __future__ import annotations

TF_SUITES = ("matmul", "precision", "memory", "accumulate", "compile")
TF_PREFIX = "tf-"  # results.json names the TensorFlow side of suite "matmul" "tf-matmul"
