"""``resume: auto``: continue from the newest checkpoint when there is one, else start; the default for
``gpulab train`` under torchrun's elastic agent (``gpulab launch``) unless the user chose."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from gpulab.core.run import default_resume
from gpulab.engines.torch.train.trainer import Trainer


def _fit(out, max_steps: int) -> Trainer:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    torch.manual_seed(0)
    trainer = Trainer(device="cpu", progress=False, tensorboard=False, batch_size=16, max_steps=max_steps,
                      out_dir=str(out), mfu=False)  # fmt: skip
    model = torch.nn.Linear(4, 1)
    trainer.fit(model, (x, x.sum(1, keepdim=True)), loss_fn=F.mse_loss,
                optimizer=lambda p: torch.optim.SGD(p, lr=0.1), resume="auto")  # fmt: skip
    return trainer


def test_auto_starts_fresh_without_a_checkpoint_and_resumes_with_one(tmp_path):
    first = _fit(tmp_path, max_steps=3)
    assert first.resumed_from is None and first.state.global_step == 3
    second = _fit(tmp_path, max_steps=6)
    assert second.resumed_from == tmp_path / "checkpoints" / "step-00000003"
    assert [h["step"] for h in second.history if "loss" in h] == [6]  # steps 4..6 only


def test_launched_runs_default_to_auto_unless_the_user_chose():
    elastic = {"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0"}
    assert default_resume({"recipe": "mlp"}, elastic)["resume"] == "auto"
    assert default_resume({"recipe": "mlp", "resume": "latest"}, elastic)["resume"] == "latest"
    assert "resume" not in default_resume({"recipe": "mlp"}, {})
