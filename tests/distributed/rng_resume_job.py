"""A 2-rank Trainer job for the per-rank RNG resume test (run by ``gpulab launch``; not collected).

    python rng_resume_job.py OUT [--die-after K]

DDP on gloo; the model has dropout, and each rank also draws ``rank + 1`` extra numbers a step, so the
ranks' random streams differ. ``resume: auto``: a restarted attempt continues from the newest checkpoint.
With ``--die-after K`` rank 1 of the first attempt exits right after step K's checkpoint. Each rank
writes ``rankN.pt``: its final parameters, its CPU generator's state, and the checkpoint files it hashed
while resuming.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

from gpulab.checkpoint import io as checkpoint_io
from gpulab.core.callbacks import Callback
from gpulab.engines.torch.train.trainer import Trainer


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
        self.rank = int(os.environ.get("RANK", "0"))

    def forward(self, x):
        if self.training:
            torch.rand(self.rank + 1)  # rank-dependent draws: the ranks' generators diverge
        return self.net(x)


class HashLog(Callback):
    """Records which checkpoint files this rank hashes while it resumes (until the fit starts)."""

    def __init__(self) -> None:
        self.names: list[str] | None = []
        real = checkpoint_io.sha256_of

        def logged(path):
            if self.names is not None:
                self.names.append(f"{path.parent.name}/{path.name}")
            return real(path)

        checkpoint_io.sha256_of = logged

    def on_fit_start(self, trainer, state):
        self.hashed, self.names = self.names, None


class DieAfter(Callback):
    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, trainer, state):  # called after the step's checkpoint was written
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
        if state.global_step == self.step and trainer.runtime.rank == 1 and first_attempt:
            os._exit(3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--die-after", type=int)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g)
    torch.manual_seed(0)
    model = Noisy()
    trainer = Trainer(device="cpu", precision="fp32", batch_size=8, max_steps=12, checkpoint_every=4,
                      keep_last=None, log_every=4, out_dir=args.out, progress=False, tensorboard=False,
                      seed=5, callbacks=[DieAfter(args.die_after), hashes := HashLog()])  # fmt: skip
    trainer.fit(model, (x, y), loss_fn=nn.functional.cross_entropy,
                optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2), resume="auto")  # fmt: skip
    state = {
        k: v.detach().clone() for k, v in trainer.runtime.strategy.unwrap(trainer.model).state_dict().items()
    }
    torch.save({"params": state, "rng": torch.get_rng_state(), "resumed_from": str(trainer.resumed_from),
                "hashed": hashes.hashed}, os.path.join(args.out, f"rank{trainer.runtime.rank}.pt"))  # fmt: skip


if __name__ == "__main__":
    main()
