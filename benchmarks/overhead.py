"""Framework overhead on the launch-bound `mlp` workload: microseconds per optimizer step.

  (a) a hand-written PyTorch loop with a DataLoader, exactly as the tutorials write it
  (b) the Trainer with its defaults (progress bar and JSONL/TensorBoard logging on, checkpoints off),
      fed the same DataLoader; its defaults include running torch's Adam on its fused kernels
  (b0) the same, with the optimizer exactly as given (fuse_optimizer=False): the loop's own overhead
  (c) the Trainer fed plain tensors (its fast path: index batching, data resident on the device)
  (cm) (c) with mfu=True, as `gpulab train` runs (the matmul peak and the FLOP count)
  (c2) on a GPU only: (c) with compile_mode=reduce-overhead, the model's forward and backward replayed
      as CUDA graphs (the issue's "CUDA graphs through compile are fair game"; on a CPU inductor is slower)
  (cg) on a GPU only: (c) with cuda_graph=true, the whole step (forward, backward and the optimizer) one
      CUDA graph replayed per step (issue 24 item 1)

Besides us/step of the loop alone, every variant's whole job is timed from the ``fit()`` call (for (a): the
line after the model is built) to its return: the fixed cost a short job pays on top of its steps.
Repeats are interleaved (a, b, c, a, b, c, ...) so drift in machine load hits all three alike; the
median per variant is reported, ratios last.
Usage: python benchmarks/overhead.py [--device cuda] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.core.callbacks import Callback
from gpulab.runtime.memory import synchronize
from gpulab.train.recipes.mlp import make_data, make_model
from gpulab.train.trainer import Trainer

# 16 epochs = 2000 steps a run: the Trainer's fixed per-fit costs (~3 ms measured: the last metrics read,
# the result, closing the progress bar and the writers) then add ~1.5 us per step, so the figure is the
# per-step overhead.
BATCH, EPOCHS, LR = 64, 16, 1e-3


def hand_written(x, y, device: torch.device) -> tuple[float, float]:
    """The tutorial loop: DataLoader over a TensorDataset, .to(device) per batch.

    Returns (us/step of the loop, seconds of the whole job with its set-up)."""
    torch.manual_seed(0)
    model = make_model().to(device)
    start = time.perf_counter()  # the model is the user's on both sides: set-up starts after it
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.BCEWithLogitsLoss()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    steps = 0
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(EPOCHS):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
    synchronize(device)
    end = time.perf_counter()
    return (end - t0) / steps * 1e6, end - start


class LoopTimer(Callback):
    """Times the Trainer's loop alone (fit start to fit end, device synchronised), as (a) is timed."""

    def on_fit_start(self, trainer, state):
        synchronize(trainer.runtime.device)
        self.t0 = time.perf_counter()

    def on_fit_end(self, trainer, state, result):
        synchronize(trainer.runtime.device)
        self.seconds = time.perf_counter() - self.t0


def with_trainer(data, device: torch.device, out_dir: str, **settings) -> tuple[float, float]:
    """The Trainer with progress bar and JSONL + TensorBoard logging on.

    Returns (us/step of the loop, seconds from the ``fit()`` call to its return, set-up included).

    Checkpoints are off: (a) saves none, and a run this short would mostly time their disk writes."""
    torch.manual_seed(0)
    timer = LoopTimer()
    trainer = Trainer(
        device=str(device), precision="fp32", epochs=EPOCHS, batch_size=BATCH, progress=True,
        out_dir=out_dir, log_every=50, callbacks=[timer], checkpoints=False, **settings,
    )  # fmt: skip
    loss_fn = nn.BCEWithLogitsLoss()
    model = make_model()
    start = time.perf_counter()
    result = trainer.fit(model, data, loss_fn=loss_fn, optimizer=lambda p: torch.optim.Adam(p, lr=LR))
    synchronize(device)
    whole = time.perf_counter() - start
    if settings.get("compile") and not result.compiled:
        raise RuntimeError("torch.compile fell back to eager (see the warning above)")
    graph = result.extras.get("cuda_graph") or {}
    if settings.get("cuda_graph") and graph.get("mode") != "graph":
        raise RuntimeError(f"no whole-step graph: {graph.get('reason')}")
    return timer.seconds / result.steps * 1e6, whole


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    device = torch.device(args.device)
    x, y = make_data(10_000, 20, 1234)
    x, y = x[:8000], y[:8000]
    tmp = tempfile.mkdtemp(prefix="gpulab-overhead-")

    def loader():
        return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)

    variants = {
        "a_hand_written_dataloader": lambda: hand_written(x, y, device),
        "b_trainer_same_dataloader": lambda: with_trainer(loader(), device, tmp),
        "b0_trainer_optimizer_as_given": lambda: with_trainer(loader(), device, tmp, fuse_optimizer=False),
        "c_trainer_tensors": lambda: with_trainer((x, y), device, tmp),
        "cm_trainer_tensors_mfu": lambda: with_trainer((x, y), device, tmp, mfu=True),
    }
    if device.type == "cuda":
        variants["c2_trainer_tensors_cuda_graphs"] = lambda: with_trainer(
            (x, y), device, tmp, compile=True, compile_mode="reduce-overhead"
        )
        variants["cg_trainer_tensors_whole_step_graph"] = lambda: with_trainer(
            (x, y), device, tmp, cuda_graph=True
        )
    with contextlib.redirect_stdout(sys.stderr):  # the progress bars; stdout keeps the figures alone
        for name, fn in list(variants.items()):  # warm-up: imports, allocator, writers, compilation
            try:
                fn()
            except Exception as exc:  # an optional variant that cannot run here is reported, not fatal
                if not name.startswith(("c2", "cg")):
                    raise
                print(f"{name}: not measured: {type(exc).__name__}: {exc}", file=sys.stderr)
                del variants[name]
        times: dict[str, list[float]] = {k: [] for k in variants}
        whole: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, fn in variants.items():
                us, seconds = fn()
                times[name].append(us)
                whole[name].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    a, b, b0, c = (times[k] for k in list(variants)[:4])
    # Each ratio is taken within a round (runs seconds apart) and the median of those is reported: a
    # slow spell of the machine then moves both sides of a ratio instead of one.
    ratios = {
        "b_over_a": paired_median(b, a),
        "b0_over_a": paired_median(b0, a),
        "a_over_c": paired_median(a, c),
        # Whole jobs, set-up included: what a short run as `gpulab train` starts it (MFU on) keeps.
        "a_over_c_whole": paired_median(whole["a_hand_written_dataloader"], whole["c_trainer_tensors"]),
        "a_over_cm_whole": paired_median(whole["a_hand_written_dataloader"], whole["cm_trainer_tensors_mfu"]),
    }
    if "c2_trainer_tensors_cuda_graphs" in times:
        ratios["a_over_c2"] = paired_median(a, times["c2_trainer_tensors_cuda_graphs"])
    if "cg_trainer_tensors_whole_step_graph" in times:
        ratios["a_over_cg"] = paired_median(a, times["cg_trainer_tensors_whole_step_graph"])
        ratios["c_over_cg"] = paired_median(c, times["cg_trainer_tensors_whole_step_graph"])
    report = {
        "us_per_step_median": med,
        "us_per_step_min": {k: min(v) for k, v in times.items()},
        "whole_job_s_median": {k: round(statistics.median(v), 4) for k, v in whole.items()},
        **ratios,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "steps_per_run": EPOCHS * -(-8000 // BATCH),
        "date": datetime.now(timezone.utc).date().isoformat(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, us in med.items():
        runs = ", ".join(f"{t:.0f}" for t in times[name])
        print(f"{name:30s} {us:7.1f} us/step median, {min(times[name]):7.1f} min   (runs: {runs})")
    for name, seconds in report["whole_job_s_median"].items():
        print(f"{name:30s} {seconds * 1e3:7.1f} ms whole job (set-up included), median")
    print("ratios: the median over rounds of each round's ratio")
    print(f"(b)/(a)  = {ratios['b_over_a']:.3f}  target <= 1.03  (the Trainer as it comes, same DataLoader)")
    print(f"(b0)/(a) = {ratios['b0_over_a']:.3f}  (the loop alone: the hand-written loop's Adam kernels)")
    print(f"(a)/(c)  = {ratios['a_over_c']:.2f}   target >= 2 on CPU, >= 5 on a GPU  (fast path speed-up)")
    print(f"(a)/(c)  = {ratios['a_over_c_whole']:.2f}   whole jobs, set-up included")
    print(f"(a)/(cm) = {ratios['a_over_cm_whole']:.2f}   whole jobs, with MFU on as `gpulab train` runs")
    if "a_over_c2" in ratios:
        print(f"(a)/(c2) = {ratios['a_over_c2']:.2f}   (the fast path, CUDA graphs through torch.compile)")
    if "a_over_cg" in ratios:
        print(f"(a)/(cg) = {ratios['a_over_cg']:.2f}   target >= 5  (the whole step as one CUDA graph)")
        print(f"(c)/(cg) = {ratios['c_over_cg']:.2f}   (what the whole-step graph gains over the fast path)")


def paired_median(top: list[float], bottom: list[float]) -> float:
    return statistics.median(t / b for t, b in zip(top, bottom, strict=True))


if __name__ == "__main__":
    main()
