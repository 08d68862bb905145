"""A training job for the exact-resume tests, run as a real process (not collected by pytest): forked from
tests/forked.py's server (``main``), or from the command line.

    python resume_job.py OUT RESULT [--resume] [--kill-at K] [--pause-save-at K] [--dataset] [--dict]
                         [--loader own-generator|global-rng|workers|persistent-workers] [--resume-data replay|skip]

Trains a small MLP with dropout, shuffling, a cosine LR schedule and accumulation 2 for STEPS optimizer
steps, logging the loss every step, and writes per-step losses, final parameters and optimizer state to
RESULT. --kill-at K SIGKILLs the process right after step K's checkpoint is written; --pause-save-at K
sets the checkpoint test hook so the save of step K stops before its rename (the test kills it there).
--dict: dict batches (a dict of tensors, or with --dataset a Dataset of dicts) for a model called with
keyword arguments that computes its own loss (no loss_fn), the way Hugging Face models are trained.
--loader: the user's own shuffling DataLoader over the Dataset (batch 16): with its own seeded generator,
drawing from torch's global RNG (no generator), or with 2 workers (and a generator), persistent or not.
--resume-data skip: a resumed epoch skips its consumed batches at the sampler instead of loading them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gpulab.core.callbacks import Callback
from gpulab.engines.torch.train.trainer import Trainer

STEPS, EVERY = 20, 5  # 200 samples / batch 16 = 13 batches = 7 optimizer steps per epoch (last window short)


class Pairs(Dataset):
    """A map-style dataset, to exercise the DataLoader path instead of the tensor fast path."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class DictPairs(Pairs):
    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


class OwnLoss(nn.Module):
    """A model called with keyword arguments that returns its own loss, as Hugging Face models do."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, features, labels=None):
        logits = self.net(features)
        return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}


class Interrupt(Callback):
    def __init__(self, kill_at: int | None, pause_save_at: int | None):
        self.kill_at, self.pause_save_at = kill_at, pause_save_at

    def on_step_end(self, trainer, state):
        if self.pause_save_at is not None and state.global_step == self.pause_save_at - 1:
            os.environ["GPULAB_CHECKPOINT_PAUSE_AT"] = "before-rename"
        if state.global_step == self.kill_at:  # step K's checkpoint is already on disk
            os.kill(os.getpid(), signal.SIGKILL)


def users_loader(data: Dataset, kind: str) -> DataLoader:
    """A shuffling DataLoader as a user writes one; its generator is seeded afresh in every process."""
    generator = None if kind == "global-rng" else torch.Generator().manual_seed(11)
    workers = (
        {"num_workers": 2, "persistent_workers": kind == "persistent-workers"} if "workers" in kind else {}
    )
    return DataLoader(data, batch_size=16, shuffle=True, generator=generator, **workers)


def main(argv: list[str] | None = None) -> None:
    """One run as the command line says; the uninterrupted references call it once per flavour in one
    process (every run seeds all it draws from: its data, its model, its Trainer's seed)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("result")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--kill-at", type=int)
    ap.add_argument("--pause-save-at", type=int)
    ap.add_argument("--dataset", action="store_true")
    ap.add_argument("--dict", action="store_true")
    ap.add_argument("--loader", choices=["own-generator", "global-rng", "workers", "persistent-workers"])
    ap.add_argument("--threads", type=int, help="torch's intra-op threads")
    ap.add_argument("--resume-data", choices=["replay", "skip"], default="replay")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(200, 8, generator=g), torch.randint(0, 3, (200,), generator=g)
    if args.dict:
        data = DictPairs(x, y) if args.dataset else {"features": x, "labels": y}
    else:
        data = Pairs(x, y) if args.dataset else (x, y)
    if args.loader:
        data = users_loader(Pairs(x, y), args.loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    if args.dict:
        model = OwnLoss(model)
    trainer = Trainer(
        device="cpu",  # bit-exact comparisons of the CPU's arithmetic, on any machine
        max_steps=STEPS,
        batch_size=16,
        accumulate=2,
        log_every=1,
        checkpoint_every=EVERY,
        keep_last=None,
        out_dir=args.out,
        progress=False,
        tensorboard=False,
        seed=3,
        resume_data=args.resume_data,
        mfu=True,  # the CLI's default: its peak measurement and FLOP count must not move the RNG
        callbacks=[Interrupt(args.kill_at, args.pause_save_at)],
    )
    trainer.fit(
        model,
        data,
        loss_fn=None if args.dict else nn.CrossEntropyLoss(),
        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
        scheduler=lambda opt, total: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total),
        resume="latest" if args.resume else None,
    )
    losses = {h["step"]: h["loss"] for h in trainer.history if "loss" in h}
    torch.save(
        {"losses": losses, "params": model.state_dict(), "optimizer": trainer.optimizer.state_dict()},
        args.result,
    )


def main_many(argv: list[str]) -> None:
    """The runs of a JSON list of command lines, one after another in this process."""
    for args in json.loads(argv[0]):
        main(args)


if __name__ == "__main__":
    main()
