"""Worker script for the `gpulab launch` tests (run by torchrun's workers), plus the tests' helpers.

Modes (``python launch_job.py MODE OUT_DIR [options]``):

- ``allreduce``: gloo all_reduce of rank + 1; each rank writes ``rank{N}.json`` with what it saw.
- ``hold``: joins the group through gpulab's ``Runtime``, then waits for ``OUT/release``.
- ``exit``: the rank ``--fail-rank`` exits with ``--code``; the others sleep until torchrun stops them.
- ``train``: a hand-written DDP loop on the ``mlp`` recipe's model and data (plain
  torch.distributed, not gpulab's Trainer). Rank 0 checkpoints model + optimizer every
  ``--ckpt-every`` steps (torch.save to a temp file, then os.replace: a kill never leaves half a
  file); a restart resumes from it. ``--kill-at S`` makes rank ``--kill-rank`` SIGKILL itself before
  step S, once (a marker file in OUT_DIR remembers it across restarts). Rank 0 writes ``final.pt``
  (parameters) and ``final.json`` (where it resumed from, TORCHELASTIC_RESTART_COUNT, world size).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

JOB = str(Path(__file__).resolve())


def _rank() -> int:
    return int(os.environ["RANK"])


def allreduce(out: Path, _args) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(os.environ.get("GPULAB_DIST_BACKEND", "gloo"))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    seen = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "env_world_size": int(os.environ["WORLD_SIZE"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "sum": t.item(),
        "backend": os.environ.get("GPULAB_DIST_BACKEND"),
        "pg_backend": dist.get_backend(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "nccl_async_error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    }
    (out / f"rank{seen['rank']}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


def hold(out: Path, _args) -> None:
    """Join the group as gpulab's Runtime does, all_reduce, write ``rank{N}.ready`` with what the rank
    saw, then wait (at most 60 s) for ``OUT/release`` so a test can look at the job's sockets."""
    import torch
    import torch.distributed as dist

    from gpulab.engines.torch.runtime.runtime import Runtime

    runtime = Runtime(device="cpu", strategy="ddp")
    t = torch.ones(1)
    dist.all_reduce(t)
    seen = {k: os.environ.get(k) for k in ("MASTER_ADDR", "GLOO_SOCKET_IFNAME")}
    (out / f"rank{dist.get_rank()}.ready").write_text(json.dumps({**seen, "sum": t.item()}))
    deadline = time.monotonic() + 60
    while not (out / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.teardown()


def exit_rank(_out: Path, args) -> None:
    if _rank() == args.fail_rank:
        sys.exit(args.code)
    time.sleep(120)  # torchrun stops this rank when the other fails


def train(out: Path, args) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpulab.engines.torch.recipes.mlp import make_data, make_model

    # A finite timeout: if a peer dies, this rank fails too (and torchrun can restart) instead of waiting.
    dist.init_process_group(os.environ.get("GPULAB_DIST_BACKEND", "gloo"), timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    x, y = make_data(1024, 20, 1234)
    model = make_model(20)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ckpt, start = out / "ckpt.pt", 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    per_rank = args.global_batch // world
    for step in range(start, args.steps):
        marker = out / f"killed_rank{rank}_at_step{step}"
        if step == args.kill_at and rank == args.kill_rank and not marker.exists():
            marker.touch()  # kill once, whichever attempt first gets here
            os.kill(os.getpid(), signal.SIGKILL)
        lo = (step * args.global_batch) % len(x) + rank * per_rank
        loss = loss_fn(ddp(x[lo : lo + per_rank]), y[lo : lo + per_rank])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step + 1) % args.ckpt_every == 0:
            tmp = out / f".ckpt.{os.getpid()}.tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, ckpt)
    if rank == 0:
        torch.save(model.state_dict(), out / "final.pt")
        meta = {"resumed_from": start, "restart_count": attempt, "world_size": world}
        (out / "final.json").write_text(json.dumps(meta))
    dist.destroy_process_group()


# --- helpers for the tests ----------------------------------------------------------------------------


def job_env(**extra: str) -> dict[str, str]:
    """The environment for a launcher under test: one thread per worker, so runs compare bit for bit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "TORCHELASTIC_", "PET_"))}
    # CUDA_VISIBLE_DEVICES empty: these jobs are gloo jobs on the CPU, on a machine with GPUs too.
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}, **extra)
    return env


def gpulab_launch(
    *args: str, env=None, timeout: float = 120, prefix=(), server=None
) -> subprocess.CompletedProcess:
    """Run ``gpulab launch ARGS`` as a real process (optionally behind ``prefix``, e.g. ip netns exec), forked
    from ``server`` where given (tests/conftest.py's gpulab_server: the launcher does not import torch
    again; its workers start as always)."""
    env = env or job_env()
    if server is None or prefix:
        cmd = [*prefix, sys.executable, "-m", "gpulab", "launch", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory() as tmp:
        proc = server.start("gpulab.cli:main", ["launch", *args], stderr=Path(tmp) / "launch", environ=env)
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(["gpulab", "launch", *args], proc.returncode, out, err)


TRAIN = ["--steps", "30", "--ckpt-every", "5"]
_reference: dict[str, Path] = {}


def reference_run(root: Path, server=None) -> Path:
    """An uninterrupted single-node 2-process ``train`` run (done once per pytest session): its OUT dir."""
    if "train" not in _reference:
        out = root / "reference"
        out.mkdir(parents=True)
        r = gpulab_launch("--nproc-per-node", "2", "--", JOB, "train", str(out), *TRAIN, server=server)
        assert r.returncode == 0, r.stderr[-3000:]
        _reference["train"] = out
    return _reference["train"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["allreduce", "exit", "train", "hold"])
    p.add_argument("out", type=Path)
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--code", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--kill-at", type=int, default=-1)
    p.add_argument("--kill-rank", type=int, default=1)
    args = p.parse_args()
    modes = {"allreduce": allreduce, "exit": exit_rank, "train": train, "hold": hold}
    modes[args.mode](args.out, args)
    # Done and saved: leave without the interpreter's teardown, where gloo's worker threads releasing the
    # last collective's buffers can abort the process (SIGABRT, "terminate called without an active
    # exception"; seen once in CI). These tests are about torchrun's restarts, not torch's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
