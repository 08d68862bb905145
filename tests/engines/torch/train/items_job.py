"""Worker for test_items.py (not collected): one rank of a 2-rank Gloo DDP fit with accumulation on
padded token labels; rank 0 saves the final parameters to OUT.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python items_job.py OUT
"""

from __future__ import annotations

import sys

import torch

from gpulab.engines.torch.train.trainer import Trainer


def main() -> None:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    import test_items as t

    torch.set_num_threads(1)
    trainer = Trainer(strategy="ddp", **t.settings(batch_size=4, accumulate=2))
    trainer.fit(t.Tagger(), t.data(), loss_fn=t.token_cross_entropy, optimizer=t.sgd)
    if trainer.runtime.rank == 0:
        torch.save({k: v.detach().clone() for k, v in trainer.model.module.state_dict().items()}, sys.argv[1])


if __name__ == "__main__":
    main()
