"""What the TensorFlow engine's preemption agreement costs a step (``engines/tensorflow/stop_flag.py``).

With several workers the step stacks the loss with the worker's stop request (one variable read) and
reduces both in one collective, and the host reads the previous step's sum (a finished scalar) at each step
end. Here, on this machine's CPU, the ``mlp`` recipe's step (batch 64) under a one-worker
MultiWorkerMirroredStrategy (the multi-worker step's code, its collectives included) is timed with the flag
and without it, in adjacent blocks of 100 steps (31 pairs, so drift in machine load hits both alike):
medians of µs per step and the median of the pairs' ratios.
Usage: python benchmarks/stop_flag_overhead.py [--pairs 31] [--block 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.pop("TF_CONFIG", None)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from gpulab.engines.tensorflow.compile import CompiledStep  # noqa: E402
from gpulab.engines.tensorflow.recipes import mlp  # noqa: E402
from gpulab.engines.tensorflow.trainer import TfTrainer  # noqa: E402


def _steps(trainer: TfTrainer) -> tuple:
    """The trainer's own step with the flag (``trainer.step``) and the same step without it, on one window."""
    off = CompiledStep(tf, trainer._distributed(tf, trainer._replica_step), jit=False)
    window = [next(iter(trainer._epoch_data()))]
    flag = trainer.stop_flag

    def step_on() -> object:
        loss, summed = trainer.step(*window)
        flag.record(summed)
        flag.lagged(False)  # as StopOnSignal asks at every step end
        return loss

    return (lambda: off(*window)), step_on


def _block(step, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        loss = step()
    float(loss)  # the last step has finished
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=31)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    class _Trainer(TfTrainer):
        def _setup(self, *a) -> None:
            self._agree_on_stop = True  # as fit() sets it with several workers
            super()._setup(*a)

    trainer = _Trainer(strategy="multiworker", progress=False)
    trainer._tf = tf
    trainer._configure(tf, keras)
    trainer._setup(tf, keras, mlp({}), None)
    off, on = _steps(trainer)
    for step in (off, on):
        _block(step, 20)  # tracing and warm-up
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.pairs):
        runs["off"].append(_block(off, args.block))
        runs["on"].append(_block(on, args.block))
    ratios = [b / a for a, b in zip(runs["off"], runs["on"], strict=True)]
    m_off, m_on = statistics.median(runs["off"]), statistics.median(runs["on"])
    result = {
        "us_per_step_off": m_off,
        "us_per_step_on": m_on,
        "median_pair_ratio": statistics.median(ratios),
        "runs": runs,
        "environment": {
            "tensorflow": tf.__version__,
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "load": os.getloadavg(),
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"flag off {m_off:.0f} µs/step, on {m_on:.0f} µs/step; median ratio of adjacent blocks "
            f"{result['median_pair_ratio']:.3f} (load {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
