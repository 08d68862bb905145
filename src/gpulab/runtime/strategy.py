"""Kept so ``gpulab.runtime.strategy`` stays importable; the strategies live in ``runtime/strategies/``."""

from gpulab.runtime.strategies import (
    REDUCE_OPS,
    STRATEGIES,
    Single,
    Strategy,
    check_reduce_op,
    resolve_strategy,
    strategy_choices,
)

__all__ = [
    "REDUCE_OPS",
    "STRATEGIES",
    "Single",
    "Strategy",
    "check_reduce_op",
    "resolve_strategy",
    "strategy_choices",
]
