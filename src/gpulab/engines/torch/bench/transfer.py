"""transfer: host<->device copy bandwidth, pageable against pinned, and a training step fed with and
without the project's ``DevicePrefetcher``.

Pinned (page-locked) host memory lets the GPU's copy engine read it directly and asynchronously;
pageable memory is first staged by the driver, synchronously. The prefetcher copies batch i+1 on a side
stream while batch i computes, which only overlaps from pinned memory.

Without a GPU there is no device copy: the suite measures what is still meaningful, the host's own
copy bandwidth and the prefetcher's cost on a CPU target (none: it passes batches through), and says so.
"""

from __future__ import annotations

import torch
from torch import nn

from gpulab.engines.torch.data.prefetch import DevicePrefetcher
from gpulab.measure.harness import MIB, BenchContext, Timing
from gpulab.measure.plots import Panel, Plot, series_from_rows
from gpulab.measure.results import Row, SuiteResult

PROFILES = {
    "full": {"sizes_mib": (1, 4, 16, 64, 256), "batches": 16, "batch": 512, "features": 4096},
    "quick": {"sizes_mib": (1, 16, 64), "batches": 8, "batch": 256, "features": 1024},
    "smoke": {"sizes_mib": (1,), "batches": 2, "batch": 16, "features": 64},
}
CPU_HIDDEN = 256  # keeps the CPU step short: the point there is the loader's cost, not the model


def run(ctx: BenchContext) -> SuiteResult:
    cfg = ctx.pick(PROFILES)
    result = SuiteResult(
        title="Host-device transfer",
        description="Copy bandwidth (GB/s = bytes / median time) by direction and host memory kind, and a "
        "training step fed from host memory with and without the prefetcher.",
    )
    copies = _gpu_copies if ctx.on_gpu else _host_copies
    result.rows += copies(ctx, cfg)
    result.rows += _prefetch(ctx, cfg)
    if not ctx.on_gpu:
        result.notes += [
            "No GPU: there is no host-to-device or device-to-host copy to time (n/a); pinned memory "
            "needs an accelerator too (n/a). The copy rows are the host's own memory bandwidth, the ceiling "
            "any loader on this machine works under.",
            "On a CPU target the prefetcher passes batches through untouched: its two rows should match, "
            "which shows it costs nothing there.",
        ]
    else:
        result.notes.append("Pinned copies are issued non_blocking; pageable ones cannot overlap anyway.")
    result.plots.append(_plot(result.rows))
    return result


def _copy_row(
    ctx: BenchContext, direction: str, memory: str, size_mib: int, src, dst, non_blocking: bool
) -> Row:
    timing = ctx.measure(lambda: dst.copy_(src, non_blocking=non_blocking), min_sample_s=0.005)
    figures = {"bandwidth": timing.rate(size_mib * MIB, "GB/s", 1e-9), "time": timing.seconds("ms")}
    return Row({"test": "copy", "direction": direction, "memory": memory, "size_mib": size_mib}, figures, {})


def _host_copies(ctx: BenchContext, cfg: dict) -> list[Row]:
    rows = []
    for size in cfg["sizes_mib"]:
        src = torch.randn(size * MIB // 4, generator=torch.Generator().manual_seed(0))
        rows.append(_copy_row(ctx, "host-to-host", "pageable", size, src, torch.empty_like(src), False))
    return rows


def _gpu_copies(ctx: BenchContext, cfg: dict) -> list[Row]:
    rows = []
    for size in cfg["sizes_mib"]:
        n = size * MIB // 4
        device = torch.empty(n, device=ctx.device)
        for memory, pinned in (("pageable", False), ("pinned", True)):
            host = torch.empty(n, pin_memory=pinned)
            rows.append(_copy_row(ctx, "host-to-device", memory, size, host, device, pinned))
            rows.append(_copy_row(ctx, "device-to-host", memory, size, device, host, pinned))
        del device
        torch.cuda.empty_cache()
    return rows


def _prefetch(ctx: BenchContext, cfg: dict) -> list[Row]:
    """Time one pass over ``batches`` host batches, fed plainly and through the prefetcher."""
    hidden = cfg["features"] if ctx.on_gpu else CPU_HIDDEN
    with torch.random.fork_rng(devices=[]):  # seeded, without moving the caller's random stream
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(cfg["features"], hidden), nn.ReLU(), nn.Linear(hidden, 10))
    model = model.to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    pin = ctx.on_gpu
    g = torch.Generator().manual_seed(0)
    host = [
        (
            torch.randn(cfg["batch"], cfg["features"], pin_memory=pin, generator=g),
            torch.randint(0, 10, (cfg["batch"],), pin_memory=pin, generator=g),
        )
        for _ in range(cfg["batches"])
    ]

    def plain():
        for x, y in host:
            _train(model, optimizer, loss_fn, x.to(ctx.device), y.to(ctx.device))

    def prefetched():
        for x, y in DevicePrefetcher(host, ctx.device):
            _train(model, optimizer, loss_fn, x, y)

    rows = []
    for loader, epoch in (("plain .to(device)", plain), ("DevicePrefetcher", prefetched)):
        per_epoch = ctx.measure(epoch)
        per_step = Timing(tuple(s / len(host) for s in per_epoch.samples))
        figures = {
            "step_time": per_step.seconds("ms"),
            "samples_per_s": per_step.rate(cfg["batch"], "samples/s"),
        }
        key = {
            "test": "train step",
            "loader": loader,
            "size_mib": round(cfg["batch"] * cfg["features"] * 4 / MIB, 3),
        }
        rows.append(Row(key, figures, {"pinned": pin, "batches_per_pass": len(host)}))
    return rows


def _train(model, optimizer, loss_fn, x, y) -> None:
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _plot(rows: list[Row]) -> Plot:
    bandwidth = Panel("Copy bandwidth", "size (MiB)", "GB/s", xscale="log2")
    copies = [r for r in rows if r.key["test"] == "copy"]
    for direction, memory in dict.fromkeys((r.key["direction"], r.key["memory"]) for r in copies):
        where = lambda r, d=direction, m=memory: r.key.get("direction") == d and r.key.get("memory") == m  # noqa: E731
        bandwidth.series.append(
            series_from_rows(copies, f"{direction} {memory}", "size_mib", "bandwidth", where=where)
        )
    steps = [r for r in rows if r.key["test"] == "train step"]
    step = Panel("Training step fed from host memory", "loader", "ms per step", kind="bar")
    step.series.append(series_from_rows(steps, "step time", "loader", "step_time"))
    return Plot("transfer.png", "Host-device transfer", [bandwidth, step])
