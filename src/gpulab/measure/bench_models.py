"""The training workloads the bench suites time, by name: plain data that both engines' suites read (the
torch suites through ``engines.torch.bench.load_workload``, the TensorFlow ones through its recipes)."""

from __future__ import annotations

from typing import Any

# Model sizes the suites use, by name: recipe + options with dropout off (timing and loss comparisons
# between precisions or accumulation settings should not depend on dropout's random masks).
MODELS: dict[str, tuple[str, dict[str, Any], int]] = {
    # name: (recipe, options, batch size)
    "mlp": ("mlp", {}, 64),
    "digits": ("digits", {"dropout": 0.0}, 64),
    "chargpt-tiny": (
        "chargpt",
        {"dropout": 0.0, "n_layer": 1, "n_embd": 64, "n_head": 4, "block_size": 32, "max_chars": 50_000},
        16,
    ),
    "chargpt": ("chargpt", {"dropout": 0.0, "max_chars": 200_000}, 32),
    "chargpt-gpu": (
        "chargpt",
        {"dropout": 0.0, "n_layer": 6, "n_embd": 384, "n_head": 6, "block_size": 256},
        64,
    ),
}
