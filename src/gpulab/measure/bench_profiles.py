"""The sizes of the suites that run on both engines, per profile ("full", "quick", "smoke"): plain data
that the torch suites (engines/torch/bench/) and their TensorFlow sides (engines/tensorflow/bench/) both
read, so the two engines' rows of a workload are the same workload."""

from __future__ import annotations

MATMUL = {
    "full": {"sizes": (256, 512, 1024, 2048, 4096, 8192), "budget_s": 30.0},
    "quick": {"sizes": (256, 512, 1024, 2048, 4096, 8192), "budget_s": 3.0},
    "smoke": {"sizes": (64, 128), "budget_s": 1.0},
}
MATMUL_MIN_SAMPLE_S = 0.01  # batch products shorter than this into one clock read

ACCUMULATE = {
    "full": {"model": "digits", "global_batch": 256, "ks": (1, 2, 4, 8, 16)},
    "quick": {"model": "digits", "global_batch": 128, "ks": (1, 2, 4, 8)},
    "smoke": {"model": "digits", "global_batch": 8, "ks": (1, 2)},
}

MEMORY = {
    "full": {"model": "chargpt", "first": 8, "last": 4096, "step_budget_s": 2.0, "repeats": 5},
    "quick": {"model": "chargpt-tiny", "first": 8, "last": 512, "step_budget_s": 0.5, "repeats": 3},
    "smoke": {"model": "chargpt-tiny", "first": 2, "last": 4, "step_budget_s": 1.0, "repeats": 2},
}
MEMORY_GPU_MODELS = {"chargpt": "chargpt-gpu", "chargpt-tiny": "chargpt"}
MEMORY_GPU_LAST = {"full": 1 << 14, "quick": 1 << 12, "smoke": 4}

PRECISION = {
    "full": {"models": ("digits", "chargpt"), "warmup": 5, "steps": 50},
    "quick": {"models": ("digits", "chargpt-tiny"), "warmup": 3, "steps": 20},
    "smoke": {"models": ("digits", "chargpt-tiny"), "warmup": 1, "steps": 3, "batch_size": 8},
}
# A GPU needs a bigger model to show what mixed precision does: on an H100 (2026-11-23) the default
# chargpt ran bf16-mixed 0.8x and fp16-mixed 0.5x as fast as fp32 (launch-bound), chargpt-gpu 2.5x faster.
PRECISION_GPU_MODELS = {"chargpt": "chargpt-gpu", "chargpt-tiny": "chargpt-gpu"}

# The torch suite's variants are eager, default and reduce-overhead; the TensorFlow side reads the models
# and the batch size.
COMPILE = {
    "full": {
        "models": ("mlp", "chargpt-tiny"),
        "variants": ("eager", "default", "reduce-overhead"),
        "backend": "inductor",
    },
    "quick": {
        "models": ("mlp",),
        "variants": ("eager", "default", "reduce-overhead"),
        "backend": "inductor",
        "cpu_skip": True,
    },
    "smoke": {"models": ("mlp",), "variants": ("eager", "default"), "backend": "aot_eager", "batch_size": 8},
}

PRECISION_NAMES = ("fp32", "tf32", "bf16-mixed", "fp16-mixed")  # the precision suite's, in its order
# accumulate's tolerance: fp32 sums in another order differ by a few ulps, far inside this
ACCUMULATE_RTOL, ACCUMULATE_ATOL = 1e-4, 1e-6
