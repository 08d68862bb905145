"""What the TensorFlow engine's preemption agreement costs a step (``engines/tensorflow/stop_flag.py``).

With several workers the step stacks the loss with the worker's stop request (one variable read) and
reduces both in one collective, and the host reads the previous step's sum (a finished scalar) at each step
end. Here, on this machine's CPU, the ``mlp`` recipe under a one-worker MultiWorkerMirroredStrategy (the
multi-worker step's code, its collectives included) is timed with the flag off and on: µs per optimizer
step from the end of step 1 to the end of the last, repeats interleaved (off, on, off, ...), medians.
Usage: python benchmarks/stop_flag_overhead.py [--repeats 5] [--epochs 3] [--json]
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

import tensorflow as tf  # noqa: E402

from gpulab.engines.tensorflow.recipes import mlp  # noqa: E402
from gpulab.engines.tensorflow.trainer import TfTrainer  # noqa: E402
from gpulab.train.callbacks import Callback  # noqa: E402


class _Timed(Callback):
    """Stamps each step end; with the flag on, asks the agreement every step as ``StopOnSignal`` does."""

    def __init__(self, flag: bool) -> None:
        self.flag, self.stamps = flag, []

    def on_step_end(self, trainer, state) -> None:
        if self.flag:
            trainer.runtime.lagged_flag(False)
        self.stamps.append(time.perf_counter())


class _Trainer(TfTrainer):
    flag = False

    def _setup(self, *args) -> None:
        self._agree_on_stop = self.flag  # as fit() sets it with several workers
        super()._setup(*args)


def one(flag: bool, epochs: int) -> float:
    timed = _Timed(flag)
    trainer = type("T", (_Trainer,), {"flag": flag})(
        callbacks=[timed], strategy="multiworker", epochs=epochs, progress=False, log_every=50
    )
    trainer.fit(mlp({}))
    assert (trainer.stop_flag is not None) == flag
    s = timed.stamps
    return (s[-1] - s[0]) / (len(s) - 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(one(name == "on", args.epochs))
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    result = {
        "us_per_step_off": off,
        "us_per_step_on": on,
        "added_us": on - off,
        "ratio": on / off,
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
        print(f"flag off {off:.0f} µs/step, on {on:.0f} µs/step: {on - off:+.0f} µs ({on / off:.3f}x)")


if __name__ == "__main__":
    main()
