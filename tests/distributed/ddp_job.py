"""Worker script for the strategy tests, one process per rank (not collected), plus the tests' helpers.

    python ddp_job.py SCENARIO[,SCENARIO...] OUT_DIR

Each rank reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT as torchrun would set them (the tests
start the processes themselves with ``launch``: no torchrun needed) and writes ``OUT_DIR/rank{N}.pt``
with what each scenario produced, after every scenario (so a test can read partial results).

Scenarios:

- ``ddp``: the Trainer with strategy ddp, 2 epochs of 128 samples at batch 16 per rank, recording the
  sample ids each rank saw per step; rank 0 alone writes OUT_DIR/ddp/{metrics.jsonl, checkpoints}.
- ``accumulate``: ddp at batch 8 per rank with accumulate=2, counting DDP's gradient all-reduces
  through a comm hook (no_sync must leave out the first micro-batch of each step).
- ``nan16``: fp16-mixed; rank 1's loss is NaN at step NAN_STEP; the scaler must skip that step on both.
- ``nan32``: fp32; the same NaN must stop every rank with NonFiniteLossError naming the step.
- ``fsdp2``: strategy fsdp2 for 2 epochs with sharded checkpoints every 4 steps; then a fresh model
  resumes from step 4 and must end where the uninterrupted run ended.
- ``stall``: collective_timeout_s=5; rank STALL_RANK (env) sleeps forever after step 2.
- ``stall_async``: NCCL's shape on gloo: a loop of asynchronous all-reduces (``async_op=True``, marked
  region left at once) waited on later, outside any marked region -- where NCCL would block in an
  ``.item()``. collective_timeout_s=3; rank STALL_RANK sleeps forever before its third all-reduce.
- ``fsdp2_tied``: strategy fsdp2 on a model whose output layer shares the embedding's weight, with MFU on:
  the FLOPs are counted on the first real step (tracing would swap the DTensor parameters under FSDP).
- ``lagged_flag``: ``Runtime.lagged_flag`` with rank 1 raising its flag once; what each call returned, and
  whether teardown waited for the reduction still in flight.
- ``dict``: ``ddp`` again with dict batches (a dict of tensors) for a model called with keyword arguments
  that returns its own loss (no loss_fn), and an optimizer factory taking the model: the same result.
- ``stream``: each rank trains on its own IterableDataset, of uneven length (rank 0: 6 batches a pass,
  rank 1: 4) with max_steps=10: every pass must stop for both after 4 steps, with no rank left waiting.

``ddp``..``nan32`` share one process group that this script creates (the strategy then uses it and
leaves it alone); ``fsdp2`` and ``stall`` let each strategy create and destroy its own.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

JOB = str(Path(__file__).resolve())
SAMPLES, FEATURES, CLASSES = 128, 6, 3
NAN_STEP = 3


def dataset() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, sample id, label): the id rides along as a second input, so the model can record it."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (SAMPLES,), generator=g)
    return x, torch.arange(SAMPLES), y


class Recorder(nn.Module):
    """A small MLP that remembers the sample ids of every training forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))
        self.seen: list[list[int]] = []

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.append(ids.tolist())
        return self.net(x)


class Blocks(nn.Module):
    """For FSDP2: blocks in an nn.ModuleList are sharded one by one."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([nn.Linear(FEATURES, 16), nn.Linear(16, 16)])
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def sgd(params):
    return torch.optim.SGD(params, lr=0.2, momentum=0.9)


def settings(**overrides):
    base = {
        "device": "cpu",
        "precision": "fp32",
        "epochs": 2,
        "batch_size": 16,
        "log_every": 1,
        "seed": 5,
        "progress": False,
        "tensorboard": False,
        "collective_timeout_s": 20,
    }
    return {**base, **overrides}


def capture():
    """A callback keeping the full model at the end of fit (gathered on rank 0 for FSDP2), while the
    process group still exists: a Trainer that created its strategy tears it down when fit returns."""
    from gpulab.core.callbacks import Callback

    class Capture(Callback):
        params: dict[str, torch.Tensor] = {}

        def on_fit_end(self, trainer, state, result):
            full = trainer.runtime.strategy.model_state_dict(trainer.model)
            self.params = {k: v.detach().cpu().clone() for k, v in full.items()}

    return Capture()


def run_ddp(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.trainer import Trainer

    model, end = Recorder(), capture()
    options = settings(out_dir=str(out / "ddp"), keep_last=None)
    trainer = Trainer(strategy="ddp", callbacks=[end], **options)
    result = trainer.fit(
        model, dataset(), loss_fn=nn.functional.cross_entropy, optimizer=sgd, val_data=dataset()
    )
    return {
        "params": end.params,
        "seen": model.seen,
        "steps": result.steps,
        "final_loss": result.final_loss,
        "val_loss": result.val_loss,
        "world_size": trainer.runtime.world_size,
        "strategy": trainer.runtime.describe()["strategy"],
    }


def run_accumulate(out: Path, rank: int) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from gpulab.core.callbacks import Callback
    from gpulab.engines.torch.train.trainer import Trainer

    calls = []

    def counting_hook(state, bucket):
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    class Hook(Callback):
        def on_fit_start(self, trainer, state):
            trainer.model.register_comm_hook(None, counting_hook)

    end = capture()
    # Its own checkpoints too: a second strategy over the same process group must not see the first
    # one's "rank 0 is done" keys.
    options = settings(batch_size=8, accumulate=2, out_dir=str(out / "accumulate"), keep_last=None)
    trainer = Trainer(strategy="ddp", callbacks=[Hook(), end], **options)
    result = trainer.fit(Recorder(), dataset(), loss_fn=nn.functional.cross_entropy, optimizer=sgd)
    return {"params": end.params, "allreduce_calls": len(calls), "steps": result.steps}


def nan_loss(rank: int, bad_rank: int = 1):
    """Cross-entropy, except that rank ``bad_rank``'s NAN_STEP-th micro-batch loss is NaN."""
    count = [0]

    def loss_fn(out, target):
        count[0] += 1
        loss = nn.functional.cross_entropy(out.float(), target)
        return loss * math.nan if rank == bad_rank and count[0] == NAN_STEP else loss

    return loss_fn


def run_nan16(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.trainer import Trainer

    trainer = Trainer(strategy="ddp", **settings(precision="fp16-mixed", init_scale=1024.0, epochs=1))
    result = trainer.fit(Recorder(), dataset(), loss_fn=nan_loss(rank), optimizer=sgd)
    params = {
        k: v.detach().clone() for k, v in trainer.runtime.strategy.unwrap(trainer.model).state_dict().items()
    }
    return {"params": params, "skipped": result.skipped_steps, "steps": result.steps}


def run_nan32(out: Path, rank: int) -> dict:
    from gpulab.core.nonfinite import NonFiniteLossError
    from gpulab.engines.torch.train.trainer import Trainer

    trainer = Trainer(strategy="ddp", **settings(epochs=1, log_every=2))
    try:
        trainer.fit(Recorder(), dataset(), loss_fn=nan_loss(rank), optimizer=sgd)
    except NonFiniteLossError as exc:
        return {"error": str(exc), "stopped_at": trainer.state.global_step}
    return {"error": None, "stopped_at": trainer.state.global_step}


def run_fsdp2(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.trainer import Trainer

    root = out / "fsdp2"
    options = settings(checkpoint_every=4, keep_last=None, out_dir=str(root))
    first, second = capture(), capture()
    full = Trainer(strategy="fsdp2", callbacks=[first], **options)
    full.fit(Blocks(), dataset(), loss_fn=nn.functional.cross_entropy, optimizer=sgd, val_data=dataset())
    step4 = root / "checkpoints" / "step-00000004"
    resumed = Trainer(strategy="fsdp2", callbacks=[second], **options)
    resumed.fit(Blocks(), dataset(), loss_fn=nn.functional.cross_entropy, optimizer=sgd, resume=str(step4))
    return {
        "params": first.params,
        "resumed_params": second.params,
        "resumed_from": str(resumed.resumed_from),
        "steps": full.state.global_step,
    }


# A loaded machine can hold one rank in start-up (imports, rank 0's loggers) for longer than the short limit
# a stall test wants, which would name a rank that is only slow, before the deliberate stall. The stall
# jobs start with a generous limit and shorten it once every rank has finished a step.
START_UP_TIMEOUT_S = 120
STALL_TIMEOUT_S = 5


def run_stall(out: Path, rank: int) -> dict:
    from gpulab.core.callbacks import Callback
    from gpulab.engines.torch.train.trainer import Trainer

    stall_rank = int(os.environ["STALL_RANK"])

    class Stall(Callback):
        def on_step_end(self, trainer, state):
            if state.global_step == 1:  # both ranks are past start-up: the short limit applies from here
                trainer.runtime.strategy.watchdog.timeout_s = STALL_TIMEOUT_S
            if state.global_step == 2 and trainer.runtime.rank == stall_rank:
                (out / "stalled_at").write_text(str(time.time()))
                time.sleep(3600)

    options = settings(collective_timeout_s=START_UP_TIMEOUT_S)
    trainer = Trainer(strategy="auto", callbacks=[Stall()], **options)
    trainer.fit(Recorder(), dataset(), loss_fn=nn.functional.cross_entropy, optimizer=sgd)
    return {"finished": True}


def run_lagged_flag(out: Path, rank: int) -> dict:
    """Runtime.lagged_flag: rank 1 raises its flag at call 3 only (and rank 0 sleeps before each call, so
    the ranks are out of step); both must see it at call 4 and at no other call."""
    from gpulab.engines.torch.runtime import Runtime

    rt = Runtime("cpu", "fp32", "ddp")
    seen = []
    for i in range(7):
        if rank == 0:
            time.sleep(0.05)
        seen.append(rt.lagged_flag(rank == 1 and i == 3))
    # The last call's reduction is still in flight: teardown must finish it before the group goes.
    waited = []
    wait, value = rt.strategy._lagged
    rt.strategy._lagged = (lambda: waited.append(wait()), value)
    rt.teardown()
    return {"seen": seen, "last_waited_at_teardown": len(waited) == 1}


ASYNC_TIMEOUT_S = 3


def run_stall_async(out: Path, rank: int) -> dict:
    import torch.distributed as dist

    from gpulab.engines.torch.runtime.runtime import Runtime

    stall_rank = int(os.environ["STALL_RANK"])
    options = {"collective_timeout_s": START_UP_TIMEOUT_S}
    rt = Runtime("cpu", precision="fp32", strategy="ddp", strategy_options=options)
    for step in range(1000):
        if step == 1:  # every rank's first all-reduce completed: past start-up
            rt.strategy.watchdog.timeout_s = ASYNC_TIMEOUT_S
        if rank == stall_rank and step == 2:
            (out / "stalled_at").write_text(str(time.time()))
            time.sleep(3600)
        value = torch.ones(1)
        with rt.strategy.collective("all_reduce (async)"):
            work = dist.all_reduce(value, async_op=True)  # returns once queued, as NCCL's do
        rt.global_step += 1
        work.wait()  # outside the marked region: where a rank on NCCL waits, in .item() or a sync
    return {"finished": True}


class TiedLM(nn.Module):
    """Embedding -> block -> output layer tied to the embedding (as GPT-2), for FSDP2."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tok = nn.Embedding(CLASSES * 4, 16)
        self.blocks = nn.ModuleList([nn.Linear(16, 16)])
        self.head = nn.Linear(16, CLASSES * 4, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x).mean(dim=1)


def tokens() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randint(0, CLASSES * 4, (SAMPLES, 5), generator=g), torch.randint(0, CLASSES * 4, (SAMPLES,))


def run_fsdp2_tied(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.mfu import MfuCallback
    from gpulab.engines.torch.train.trainer import Trainer

    mfu = MfuCallback(measure_peak=False)
    trainer = Trainer(strategy="fsdp2", callbacks=[mfu] if rank == 0 else [], **settings(epochs=1))
    result = trainer.fit(TiedLM(), tokens(), loss_fn=nn.functional.cross_entropy, optimizer=sgd)
    return {"steps": result.steps, "flops_per_sample": mfu.flops_per_sample, "loss": result.final_loss}


class RankStream(torch.utils.data.IterableDataset):
    """Rank r's own stream of (x, id, label) samples: 48 samples on rank 0, 32 on rank 1."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __iter__(self):
        x, ids, y = dataset()
        part = slice(0, 48) if self.rank == 0 else slice(64, 96)
        return iter(zip(x[part], ids[part], y[part], strict=True))


def run_stream(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.trainer import Trainer

    model, end = Recorder(), capture()
    trainer = Trainer(strategy="ddp", callbacks=[end], **settings(batch_size=8, max_steps=10))
    result = trainer.fit(model, RankStream(rank), loss_fn=nn.functional.cross_entropy, optimizer=sgd)
    return {"params": end.params, "steps": result.steps, "epochs": result.epochs, "seen": model.seen}


class KeywordRecorder(Recorder):
    """``Recorder`` called the Hugging Face way: keyword arguments in, ``{"loss", "logits"}`` out."""

    def forward(self, x, ids, labels=None):
        logits = super().forward(x, ids)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def run_dict(out: Path, rank: int) -> dict:
    from gpulab.engines.torch.train.trainer import Trainer

    x, ids, y = dataset()
    names: list[str] = []

    def sgd_of(model):  # named "model": gets the user's module (not DDP's), with its own names
        names.extend(name for name, _ in model.named_parameters())
        return sgd(model.parameters())

    model, end = KeywordRecorder(), capture()
    trainer = Trainer(strategy="ddp", callbacks=[end], **settings(out_dir=str(out / "dict")))
    data = {"x": x, "ids": ids, "labels": y}
    result = trainer.fit(model, data, optimizer=sgd_of, val_data=data)
    return {
        "params": end.params,
        "seen": model.seen,
        "names": names,
        "samples": trainer.state.samples_seen,
        "accuracy": result.accuracy,
    }


SCENARIOS = {
    "dict": run_dict,
    "stream": run_stream,
    "ddp": run_ddp,
    "accumulate": run_accumulate,
    "nan16": run_nan16,
    "nan32": run_nan32,
    "fsdp2": run_fsdp2,
    "fsdp2_tied": run_fsdp2_tied,
    "stall": run_stall,
    "lagged_flag": run_lagged_flag,
    "stall_async": run_stall_async,
}
# Scenarios whose strategies create (and destroy) the process group themselves; fsdp2 does it twice in
# one process (two fits), as a script running two Trainers would.
OWN_GROUP = {"stall", "stall_async", "fsdp2", "fsdp2_tied"}


def main() -> None:
    import torch.distributed as dist

    names, out = sys.argv[1].split(","), Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    if not OWN_GROUP & set(names):
        from gpulab.engines.torch.distributed.process_group import init_process_group

        init_process_group(torch.device("cpu"), 300.0)  # as Runtime joins: stores on loopback only
    results: dict = {}
    for name in names:
        results[name] = SCENARIOS[name](out, rank)
        torch.save(results, out / f"rank{rank}.pt")
    if dist.is_initialized():
        dist.destroy_process_group()


# -- helpers for the tests (run in the pytest process) ---------------------------------------------------


def launch(scenarios: str, out: Path, world_size: int = 2, extra_env: dict | None = None) -> list:
    """Start one process per rank with torchrun's variables on 127.0.0.1; returns the Popen objects.

    Each rank's stdout+stderr go to OUT/rank{N}.log.
    """
    from gpulab.engines.torch.distributed.process_group import free_port

    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            **(extra_env or {}),
        }
        log = open(out / f"rank{rank}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen([sys.executable, JOB, scenarios, str(out)], env=env, stdout=log, stderr=log)
        )
    return procs


def wait_all(procs: list, timeout: float) -> list[int | None]:
    """Exit codes once every process ended or ``timeout`` passed (None for one still running, then killed)."""
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc, code in zip(procs, codes, strict=True):
        if code is None:
            proc.kill()
            proc.wait()
    return codes


def logs(out: Path, world_size: int = 2) -> str:
    return "\n".join(f"--- rank {r} ---\n{(out / f'rank{r}.log').read_text()}" for r in range(world_size))


if __name__ == "__main__":
    main()
