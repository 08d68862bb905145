"""What a mid-epoch resume costs before its first batch (issue 39, Build 3): ``resume_data: replay`` (the
consumed batches loaded again), ``resume_data: skip`` (their indices taken from the sampler, no item
loaded) and a torchdata ``StatefulDataLoader`` resumed by its own state (where torchdata is installed).

A user's shuffling ``DataLoader`` (batch 10, 600 items = 60 batches an epoch) over a map-style dataset
whose items take 5 ms each (a sleep: the latency of reading and decoding a sample) goes through gpulab's
``make_loader``. A run over the same loader with 0 ms items stops after 10 %, 50 % or 90 % of the epoch
and keeps its state (what a checkpoint holds); a fresh loader (as in the resumed process) takes that state,
and the time from ``load_state_dict`` to the first resumed batch in hand is the resume cost. Medians of
``--repeats``, with 0 and 2 workers; the machine's load and the other processes' CPU share are printed.
Usage: python benchmarks/resume_cost.py [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import statistics
import time
import warnings

import torch
from torch.utils.data import DataLoader, Dataset

from gpulab.engines.torch.data import make_loader
from gpulab.hardware.load import OtherCpuLoad, machine_load

ITEMS, BATCH, ITEM_S = 600, 10, 0.005
warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata 0.11 under torch 2.13
FRACTIONS = (0.1, 0.5, 0.9)


class Slow(Dataset):
    """An item that takes ``delay`` seconds to produce (0 for the run that makes the checkpoint's state)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int):
        if self.delay:
            time.sleep(self.delay)
        return torch.full((16,), float(index))


def user_loader(kind: str, delay: float, workers: int) -> DataLoader:
    """What a user's script builds in every process, its generator seeded again."""
    cls = DataLoader
    if kind == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader as cls
    g = torch.Generator().manual_seed(0)
    return cls(Slow(delay), batch_size=BATCH, shuffle=True, generator=g, num_workers=workers)


def checkpoint_state(kind: str, mode: str, workers: int, batches: int) -> dict:
    """The loader's state after ``batches`` batches of epoch 0, from a run with instant items."""
    source = make_loader(user_loader(kind, 0.0, workers), batch_size=1, device="cpu", resume_data=mode)
    iterator = iter(source)
    for _ in range(batches):
        next(iterator)
    state = source.state_dict()
    del iterator
    return state


def resume_seconds(kind: str, mode: str, workers: int, batches: int) -> float:
    state = checkpoint_state(kind, mode, workers, batches)
    fresh = make_loader(user_loader(kind, ITEM_S, workers), batch_size=1, device="cpu", resume_data=mode)
    start = time.perf_counter()
    fresh.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skip's one line about augmentations
        first = next(iter(fresh))
    seconds = time.perf_counter() - start
    assert first.shape[0] == BATCH
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    variants = [("plain", "replay"), ("plain", "skip")]
    if importlib.util.find_spec("torchdata") is not None:
        variants.append(("stateful", "replay"))
    began, others, load_before = datetime.datetime.now(datetime.UTC), OtherCpuLoad(), machine_load()
    rows = []
    per_epoch = ITEMS // BATCH
    for workers in (0, 2):
        for fraction in FRACTIONS:
            batches = round(fraction * per_epoch)
            for kind, mode in variants:
                times = [resume_seconds(kind, mode, workers, batches) for _ in range(args.repeats)]
                name = "StatefulDataLoader" if kind == "stateful" else f"resume_data: {mode}"
                spread = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}
                rows.append(
                    {"workers": workers, "fraction": fraction, "batches": batches, "loader": name, **spread}
                )
    environment = {
        "date_utc": began.strftime("%Y-%m-%d %H:%M"),
        "seconds": round((datetime.datetime.now(datetime.UTC) - began).total_seconds(), 1),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpu": _cpu_model(),
        "cores": machine_load()["cores"],
        "load_1min_before_after": [load_before["load_1min"], machine_load()["load_1min"]],
        "other_processes_cpu_share": others.fraction(),
        "torch": torch.__version__,
        "torchdata": _version("torchdata"),
        "epoch": f"{ITEMS} items of {ITEM_S * 1000:.0f} ms, batch {BATCH} ({per_epoch} batches)",
    }
    if args.json:
        print(json.dumps({"environment": environment, "rows": rows}, indent=2))
        return
    print(json.dumps(environment))
    print("| workers | resumed at | loader | resume cost, median s (min-max) |")
    print("|---:|---:|---|---:|")
    for r in rows:
        where = f"{r['fraction']:.0%} ({r['batches']} batches)"
        spread = f"{r['median_s']:.3f} ({r['min_s']:.3f}-{r['max_s']:.3f})"
        print(f"| {r['workers']} | {where} | {r['loader']} | {spread} |")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def _version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
