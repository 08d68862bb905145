"""``gpulab train`` on a Hugging Face-style recipe written as users write it: dict data, a model that
computes its own loss (no loss_fn), an optimizer factory taking the model; then ``--resume``."""

from __future__ import annotations

import json
import sys
import textwrap

from safetensors.torch import load_file
from test_cli_recipe import run_gpulab

RECIPE = """
import torch
from torch import nn
from torch.nn import functional as F
from gpulab.core.recipes.base import Recipe


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(16, 24), nn.Linear(24, 4)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(self.embed(input_ids))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return out


def adamw(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest}], lr=3e-2)


def build(options):
    ids = torch.randint(0, 16, (128, 5), generator=torch.Generator().manual_seed(0))
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids % 4}
    torch.manual_seed(0)
    return Recipe(model=Tagger(), train_data=data, val_data=data, loss_fn=None, optimizer=adamw,
                  defaults={"batch_size": 16, "tensorboard": False, "log_every": 1})
"""


def test_gpulab_train_and_resume_a_dict_batch_recipe_without_loss_fn(tmp_path):
    (tmp_path / "tagger.py").write_text(textwrap.dedent(RECIPE))
    common = ("train", "tagger:build", "--out", "run", "--device", "cpu")
    first = run_gpulab(tmp_path, *common, "--max-steps", "8")
    assert first.returncode == 0, first.stderr
    resumed = run_gpulab(tmp_path, *common, "--max-steps", "16", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 16 and summary["resumed_from"].endswith("step-00000008")
    assert summary["accuracy"] > 0.9  # from out["logits"] against batch["labels"]
    # The checkpoint's weights are the recipe's own module's: they load strictly into a fresh Tagger.
    sys.path.insert(0, str(tmp_path))
    try:
        import tagger

        weights = load_file(tmp_path / "run" / "checkpoints" / "step-00000016" / "model.safetensors")
        tagger.Tagger().load_state_dict(weights, strict=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tagger", None)
