"""The cases the plain trace cannot take: a model fake tensors cannot run is traced for real on a copy, and
dict batches (which the memory estimate does not trace) still give the rows, with the missing total said."""

from __future__ import annotations

import torch
from torch import nn

from gpulab.cli import main
from gpulab.engines.torch.inspect_model import inspect_model


class DataDependent(nn.Module):
    """``nonzero`` has a data-dependent output shape: fake tensors cannot say how many rows it keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        kept = x[x[:, 0].nonzero().squeeze(1)]
        return self.fc(kept).sum(0, keepdim=True).expand(x.shape[0], 3)


def test_a_model_fake_tensors_cannot_run_is_traced_for_real_on_a_copy():
    model = DataDependent()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.tensor([[1.0, 2, 3, 4], [0, 1, 1, 1], [2, 0, 0, 1]])
    i = inspect_model(model, (x, torch.zeros(3, dtype=torch.long)), nn.functional.cross_entropy)
    assert i.method == "real step" and i.failure is None
    fc = next(r for r in i.rows if r.name == "fc")
    assert [t.shape for t in fc.inputs] == [[2, 4]]  # the two rows whose first value is not zero
    assert fc.flops_forward == 2 * 2 * 4 * 3 and i.flops_total > i.flops_forward
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())  # the copy was stepped, not the model


DICT_RECIPE = """
import torch
from torch import nn
from gpulab.core.recipes.base import Recipe

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(50, 16), nn.Linear(16, 5)
    def forward(self, input_ids, labels):
        logits = self.out(self.emb(input_ids))
        return {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()), "logits": logits}

class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return {"input_ids": torch.arange(6) % 50, "labels": torch.zeros(6, dtype=torch.long)}

def build(options):
    return Recipe(model=Tagger(), train_data=Rows(), loss_fn=None,
                  optimizer=lambda p: torch.optim.AdamW(p), defaults={"batch_size": 4})
"""


def test_dict_batches_give_the_rows_and_the_memory_total(tmp_path, monkeypatch, capsys):
    (tmp_path / "inspect_dict_recipe.py").write_text(DICT_RECIPE)
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "inspect_dict_recipe:build", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "4×6 i64" in out and "4×6×16 f32" in out and "4×6×5 f32" in out
    assert "FLOPs per sample" in out
    assert "predicted peak memory of a training step at batch 4 (AdamW)" in out
