"""Framework overhead on the launch-bound `mlp` workload, against the seed's training loop.

  (a) the seed's loop (``engines/torch/bench/hand_mlp.py``), exactly as issue 24 describes it: the seed's
      MLP and data (``recipes/mlp.py`` ``make_model``/``make_data``, 10,000 samples, data seed 1234),
      ``DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)``, default ``torch.optim.Adam``
      (lr 1e-3; on a CPU its for-loop kernels), ``BCEWithLogitsLoss``, 5 epochs (the ``mlp`` recipe's
      default, what ``gpulab train mlp`` runs)
  (b) the Trainer with its defaults (progress bar and JSONL/TensorBoard logging on, checkpoints off),
      fed the same DataLoader; its defaults include running torch's Adam on its fused kernels
  (b0) the same, with the optimizer exactly as given (fuse_optimizer=False): the loop's own overhead
  (c) the Trainer fed plain tensors (its fast path: index batching, data resident on the device)
  (cm) (c) with mfu=True, as `gpulab train` runs (the matmul peak and the FLOP count): the headline
  (c2) on a GPU only: (c) with compile_mode=reduce-overhead (CUDA graphs of forward and backward)
  (cg) on a GPU only: (c) with cuda_graph=true, the whole step (forward, backward and the optimizer) one
      CUDA graph replayed per step (issue 24 item 1; target (a)/(cg) >= 5)

Every side trains on the same 10,000 samples for 5 epochs (785 steps), with one thread
(``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``). Checkpoints are off: the seed's loop saves none.

**Whole job**: each variant of each round runs in a fresh Python process (so every once-per-process cost
a user pays on a run -- lazy imports inside fit, the peak lookup, the FLOP count, the first step's
allocations -- is paid in every round), and is timed from the line after the model is built (the data
and the model are the user's on both sides) to the end of training, device synchronised: for (a) the
optimizer, loss and DataLoader construction and the loop; for the Trainer ``Trainer(...)`` and
``fit()``. The import of torch and gpulab and the interpreter's start are left out of that figure and
reported apart (``process_s``: the process's wall time until it reports), because they dwarf a job
this short (seconds against half a second) and torch's import is the same on both sides. That includes
``torch._dynamo``, which torch imports lazily the first time any optimizer is built (``torch.optim``'s
methods are wrapped in ``torch._disable_dynamo``): 1-3 s on the 2-core VM, the same on both sides and
longer than the whole job, so each process imports it with torch, before the timer.
**Per step**: the loop alone (for the Trainer: ``on_fit_start`` to ``on_fit_end``) over the steps.

Python bytecode is written and read where an installed package keeps it (``__pycache__``; torch's,
compiled at its install, is read, not rebuilt) and one round runs first uncounted, as an installed
package has its bytecode compiled. Rounds are interleaved (a, b, b0, c, cm, a, ...) so drift
in machine load hits all variants alike; each ratio is the median over rounds of that round's ratio.
Usage: OMP_NUM_THREADS=1 python benchmarks/overhead.py [--device cuda] [--repeats 5] [--variants a,cm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

BATCH, EPOCHS, LR, SAMPLES, FEATURES, DATA_SEED = 64, 5, 1e-3, 10_000, 20, 1234
VARIANTS = {
    "a": "a_seed_loop",
    "b": "b_trainer_same_dataloader",
    "b0": "b0_trainer_optimizer_as_given",
    "c": "c_trainer_tensors",
    "cm": "cm_trainer_tensors_mfu",
    "c2": "c2_trainer_tensors_cuda_graphs",
    "cg": "cg_trainer_tensors_whole_step_graph",
}
GPU_ONLY = ("c2", "cg")


def seed_loop(device_name: str) -> dict[str, float]:
    """The seed's loop, as issue 24 describes it (see the module docstring): ``hand_mlp.SeedLoop``, the
    same loop ``gpulab bench compile`` times per step as its hand-written row."""
    import torch

    from gpulab.engines.torch.recipes.mlp import make_data, make_model

    SeedLoop = _hand_mlp().SeedLoop

    device = torch.device(device_name)
    x, y = make_data(SAMPLES, FEATURES, DATA_SEED)
    torch.manual_seed(0)
    model = make_model().to(device)
    start = time.perf_counter()  # the model is the user's on both sides: set-up starts after it
    loop = SeedLoop(model, x, y, device, batch_size=BATCH, lr=LR)  # optimizer, loss, DataLoader
    steps = 0
    _synchronize(device)
    t0 = time.perf_counter()
    for _ in range(EPOCHS):
        for xb, yb in loop.loader:
            loop.step(xb, yb)
            steps += 1
    _synchronize(device)
    end = time.perf_counter()
    return {"us_per_step": (end - t0) / steps * 1e6, "whole_s": end - start, "steps": steps}


def with_trainer(device_name: str, variant: str, out_dir: str) -> dict[str, float]:
    """The Trainer with progress bar and JSONL + TensorBoard logging on, checkpoints off."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gpulab.core.callbacks import Callback
    from gpulab.engines.torch.recipes.mlp import make_data, make_model
    from gpulab.engines.torch.train.trainer import Trainer

    class LoopTimer(Callback):
        """Times the Trainer's loop alone (fit start to fit end, device synchronised), as (a) is timed."""

        def on_fit_start(self, trainer, state):
            _synchronize(trainer.runtime.device)
            self.t0 = time.perf_counter()

        def on_fit_end(self, trainer, state, result):
            _synchronize(trainer.runtime.device)
            self.t1 = time.perf_counter()
            self.seconds = self.t1 - self.t0

    device = torch.device(device_name)
    x, y = make_data(SAMPLES, FEATURES, DATA_SEED)
    data = (
        (x, y) if variant.startswith("c") else DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    )
    settings = {
        "b": {},
        "b0": {"fuse_optimizer": False},
        "c": {},
        "cm": {"mfu": True},
        "c2": {"compile": True, "compile_mode": "reduce-overhead"},
        "cg": {"cuda_graph": True},
    }[variant]
    torch.manual_seed(0)
    model = make_model()
    _initialise(device)  # the seed's model.to(device) creates the device's context before its clock too
    start = time.perf_counter()
    timer = LoopTimer()
    trainer = Trainer(
        device=device_name, precision="fp32", epochs=EPOCHS, batch_size=BATCH, progress=True,
        out_dir=out_dir, log_every=50, callbacks=[timer], checkpoints=False, **settings,
    )  # fmt: skip
    result = trainer.fit(
        model, data, loss_fn=nn.BCEWithLogitsLoss(), optimizer=lambda p: torch.optim.Adam(p, lr=LR)
    )
    _synchronize(device)
    whole = time.perf_counter() - start
    if settings.get("compile") and not result.compiled:
        raise RuntimeError("torch.compile fell back to eager (see the warning above)")
    graph = result.extras.get("cuda_graph") or {}
    if settings.get("cuda_graph") and graph.get("mode") != "graph":
        raise RuntimeError(f"no whole-step graph: {graph.get('reason')}")
    return {
        "us_per_step": timer.seconds / result.steps * 1e6,
        "whole_s": whole,
        "steps": result.steps,
        "before_loop_s": timer.t0 - start,  # Trainer(...) and fit's set-up up to on_fit_start
        "after_loop_s": whole - (timer.t1 - start),  # from on_fit_end to fit's return
    }


def _initialise(device) -> None:
    """Create the device's context (CUDA's: hundreds of ms), as moving a model there does."""
    import torch

    torch.empty(0, device=device)
    _synchronize(device)


def _hand_mlp():
    """``engines/torch/bench/hand_mlp.py`` loaded from its file: imported by its package name it would run
    the bench package's ``__init__`` (the Runtime and more) in (a)'s process, whose imports are reported."""
    import importlib.util
    from pathlib import Path

    package = Path(importlib.util.find_spec("gpulab").origin).parent  # finds it, imports nothing
    path = package / "engines" / "torch" / "bench" / "hand_mlp.py"
    spec = importlib.util.spec_from_file_location("hand_mlp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _synchronize(device) -> None:
    """Wait for the device's queued work (torch alone: nothing is imported inside a timed span)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one(variant: str, device_name: str, out_dir: str) -> None:
    """Run one variant in this (fresh) process and print its figures as one JSON line."""
    import psutil
    import torch
    import torch._dynamo  # noqa: F401  torch's own import, which its first optimizer would make (see above)

    torch.set_num_threads(1)
    figures = seed_loop(device_name) if variant == "a" else with_trainer(device_name, variant, out_dir)
    figures["process_s"] = time.time() - psutil.Process().create_time()
    figures["threads"] = torch.get_num_threads()
    print(json.dumps(figures), file=sys.__stdout__)


def run_one(variant: str, device: str, out_dir: str) -> dict[str, float]:
    # Bytecode cached as an installed package has it, even where the environment says not to write it:
    # otherwise every process recompiles what fit imports late. In each source's own __pycache__, not a
    # PYTHONPYCACHEPREFIX: a prefix hides the bytecode torch was installed with, and the first process
    # compiled all of torch again (13.6 s -> 6.2 s of CPU for a smoke run's one process, 2-core VM).
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    cmd = [sys.executable, __file__, "--one", variant, "--device", device, "--out", out_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--warmup-rounds", type=int, default=1,
        help="rounds run first and not counted: they compile and cache the bytecode (0: a smoke test)",
    )  # fmt: skip
    ap.add_argument(
        "--variants", default=None, help="comma-separated subset of a,b,b0,c,cm,c2,cg (a always runs)"
    )
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one variant in this process
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        import contextlib

        with contextlib.redirect_stdout(sys.stderr):  # progress bars; stdout keeps the figures alone
            one(args.one, args.device, args.out)
        return
    import tempfile

    chosen = ["a", "b", "b0", "c", "cm"] + (list(GPU_ONLY) if args.device.startswith("cuda") else [])
    if args.variants:
        chosen = ["a"] + [v for v in args.variants.split(",") if v in VARIANTS and v != "a"]
    tmp = tempfile.mkdtemp(prefix="gpulab-overhead-")
    rounds: dict[str, list[dict[str, float]]] = {VARIANTS[v]: [] for v in chosen}
    for _ in range(args.warmup_rounds + args.repeats):
        for v in list(chosen):
            try:
                rounds[VARIANTS[v]].append(run_one(v, args.device, tmp))
            except RuntimeError as exc:  # an optional CUDA-graph variant is reported, not fatal
                if v not in GPU_ONLY:
                    raise
                print(f"{VARIANTS[v]}: not measured: {exc}", file=sys.stderr)
                chosen.remove(v)
                del rounds[VARIANTS[v]]
    rounds = {name: runs[args.warmup_rounds :] for name, runs in rounds.items()}
    report = summarize(rounds, args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_report(report, rounds)


def summarize(rounds: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> dict:
    def series(name: str, key: str) -> list[float]:
        return [r[key] for r in rounds[name]]

    a = VARIANTS["a"]
    report: dict = {
        "us_per_step_median": {k: statistics.median(series(k, "us_per_step")) for k in rounds},
        "whole_job_s_median": {k: round(statistics.median(series(k, "whole_s")), 4) for k in rounds},
        "process_s_median": {k: round(statistics.median(series(k, "process_s")), 3) for k in rounds},
        "outside_loop_s_median": {
            k: [round(statistics.median(series(k, part)), 4) for part in ("before_loop_s", "after_loop_s")]
            for k in rounds
            if "before_loop_s" in rounds[k][0]
        },
        "ratios": {},
    }
    # Each ratio is taken within a round (runs seconds apart) and the median of those is reported: a slow
    # spell of the machine then moves both sides of a ratio instead of one.
    for k in rounds:
        if k == a:
            continue
        short = next(s for s, n in VARIANTS.items() if n == k)
        ratios = report["ratios"]
        ratios[f"{short}_over_a_per_step"] = paired_median(series(k, "us_per_step"), series(a, "us_per_step"))
        for key, figure in (("per_step", "us_per_step"), ("whole", "whole_s"), ("process", "process_s")):
            ratios[f"a_over_{short}_{key}"] = paired_median(series(a, figure), series(k, figure))
    import torch

    report.update(
        device=args.device,
        device_name=torch.cuda.get_device_name(args.device)
        if args.device.startswith("cuda")
        else platform.processor(),
        torch=torch.__version__,
        threads=rounds[a][0]["threads"],
        repeats=args.repeats,
        warmup_rounds=args.warmup_rounds,
        steps_per_run=int(rounds[a][0]["steps"]),
        epochs=EPOCHS,
        samples=SAMPLES,
        load_average=os.getloadavg(),
        date=datetime.now(timezone.utc).date().isoformat(),
    )
    return report


def print_report(report: dict, rounds: dict[str, list[dict[str, float]]]) -> None:
    for name in rounds:
        runs = ", ".join(f"{r['us_per_step']:.0f}" for r in rounds[name])
        print(f"{name:30s} {report['us_per_step_median'][name]:7.1f} us/step median   (runs: {runs})")
    for name in rounds:
        print(
            f"{name:30s} {report['whole_job_s_median'][name] * 1e3:7.1f} ms whole job (set-up included), "
            f"{report['process_s_median'][name]:5.2f} s process (imports included), medians"
        )
    for name, (before, after) in report["outside_loop_s_median"].items():
        print(f"{name:30s} {before * 1e3:7.1f} ms before the loop, {after * 1e3:6.1f} ms after it, medians")
    print(f"ratios: the median over rounds of each round's ratio ({report['steps_per_run']} steps a job)")
    r = report["ratios"]
    for short in ("b", "b0"):
        if f"{short}_over_a_per_step" in r:
            print(
                f"({short})/(a) = {r[f'{short}_over_a_per_step']:.3f} per step "
                "(the Trainer fed the same DataLoader)"
            )
    for short in ("c", "cm", *GPU_ONLY):
        if f"a_over_{short}_whole" in r:
            print(
                f"(a)/({short}) = {r[f'a_over_{short}_per_step']:.2f} per step, "
                f"{r[f'a_over_{short}_whole']:.2f} whole job, {r[f'a_over_{short}_process']:.2f} process"
                + ("   <- target >= 2.0 on CPU (whole job)" if short == "cm" else "")
                + ("   <- target >= 5 per step on a GPU (one graph a step)" if short == "cg" else "")
            )
    print(
        f"load average during the run (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in report['load_average'])}"
    )


def paired_median(top: list[float], bottom: list[float]) -> float:
    return statistics.median(t / b for t, b in zip(top, bottom, strict=True))


if __name__ == "__main__":
    main()
