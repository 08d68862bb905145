"""What the watchdog's publish-on-step costs a torch step (``distributed/watchdog.py``: setting
``Heartbeat.step`` wakes the watchdog thread, which writes the step to a real TCPStore).

A tiny step (Linear 20->1, batch 64, SGD) counted on a plain attribute and on a live watchdog's heartbeat,
in adjacent pairs of 500-step runs (41 pairs), so that drift in machine load hits both alike: the median of
the pairs' ratios, the medians of µs per step, and the setter alone in ns.
Usage: OMP_NUM_THREADS=1 python benchmarks/heartbeat_overhead.py
"""

from __future__ import annotations

import io
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from gpulab.engines.torch.distributed.watchdog import Watchdog


class _Plain:
    step = 0


def _loop(beat, n: int, model, opt, x) -> float:
    t = time.perf_counter()
    for _ in range(n):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        beat.step += 1
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    model = torch.nn.Linear(20, 1)
    opt, x = torch.optim.SGD(model.parameters(), 0.01), torch.randn(64, 20)
    dog = Watchdog(store, 0, 2, timeout_s=300, out=io.StringIO(), exit_fn=lambda code: None).start()
    runs: dict[str, list[float]] = {"plain": [], "heartbeat": []}
    for _ in range(41):
        runs["plain"].append(_loop(_Plain(), 500, model, opt, x))
        runs["heartbeat"].append(_loop(dog.heartbeat, 500, model, opt, x))
    setter = []
    for _ in range(9):
        beat, t = dog.heartbeat, time.perf_counter()
        for _ in range(200_000):
            beat.step += 1
        setter.append((time.perf_counter() - t) / 200_000 * 1e9)
    dog.stop()
    ratios = [b / a for a, b in zip(runs["plain"], runs["heartbeat"], strict=True)]
    print(
        json.dumps(
            {
                "us_per_step_median": {k: statistics.median(v) for k, v in runs.items()},
                "median_pair_ratio": statistics.median(ratios),
                "setter_ns_median": statistics.median(setter),
                "torch": torch.__version__,
                "load": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
