"""One rule for how a batch becomes a model's arguments and its output the predictions
(``runtime/signature.py``), as training, validation and export use it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError, DataError


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, mask=None):
        return {"logits": self.lin(x), "aux": x.sum()}


class Kwargs(Plain):
    def forward(self, x, **kwargs):
        return self.lin(x), kwargs


def test_dict_keys_are_filtered_to_what_forward_names_and_labels_stay_out_of_export_inputs():
    batch = {"x": torch.ones(2, 4), "mask": torch.ones(2), "labels": torch.zeros(2), "id": torch.ones(2)}
    sig = Signature(Plain())
    assert sig.arguments(batch) == ((), {"x": batch["x"], "mask": batch["mask"]})
    assert sig.left_out(batch) == ["labels", "id"]
    assert sig.input_names(batch) == ["x", "mask"]
    assert list(Signature(Kwargs()).arguments(batch)[1]) == list(batch)  # **kwargs: every key
    chosen = Signature(Kwargs(), inputs=["x"])
    assert list(chosen.arguments(batch)[1]) == ["x"] and chosen.input_names(batch) == ["x"]
    with pytest.raises(DataError, match=r"model_inputs names \['y'\]"):
        Signature(Plain(), inputs=["y"]).arguments(batch)
    assert Signature(Plain()).input_names((torch.ones(2, 4), torch.ones(2))) == ["input"]


def test_predictions_are_the_tensor_the_logits_a_tuples_first_or_a_named_field():
    x = torch.ones(2, 4)
    assert Signature(Plain()).predictions(x) is x
    assert Signature(Plain()).predictions({"logits": x, "aux": 1}) is x
    assert Signature(Plain()).predictions((x, {"a": 1})) is x
    assert Signature(Plain(), output="aux").predictions({"logits": 1, "aux": x}) is x
    with pytest.raises(ConfigError, match="name the field with model_output=NAME"):
        Signature(Plain()).predictions({"a": x, "b": x})


def test_validation_batches_of_a_non_contiguous_tensor_are_contiguous_like_training_ones():
    class Viewer(nn.Module):  # .view needs contiguous memory, as T5's attention does
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 2)

        def forward(self, x):
            return self.lin(x.view(x.shape[0], -1))

    x = torch.randn(64, 4, 2).transpose(1, 2)  # a non-contiguous view of the user's tensor
    y = torch.randint(0, 2, (64,))
    trainer = Trainer(device="cpu", precision="fp32", batch_size=16, epochs=1, progress=False, mfu=False)
    result = trainer.fit(
        Viewer(),
        (x, y),
        loss_fn=nn.functional.cross_entropy,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        val_data=(x, y),
    )
    assert result.val_loss is not None


def test_the_channels_last_line_is_quiet_with_progress_off(capsys):
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 4 * 4, 2))
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))
    trainer = Trainer(device="cpu", precision="fp32", batch_size=8, epochs=1, progress=False, mfu=False)
    trainer.fit(
        conv, (x, y), loss_fn=nn.functional.cross_entropy, optimizer=lambda p: torch.optim.SGD(p, 0.1)
    )
    assert "channels_last" not in capsys.readouterr().out


def test_model_output_names_the_field_validation_accuracy_reads():
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            return {"scores": self.lin(x), "aux": torch.zeros(len(x), 7)}

    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    trainer = Trainer(
        device="cpu",
        precision="fp32",
        batch_size=16,
        epochs=1,
        progress=False,
        mfu=False,
        model_output="scores",
    )
    result = trainer.fit(
        TwoHeads(),
        (x, y),
        loss_fn=lambda out, t: nn.functional.cross_entropy(out["scores"], t),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        val_data=(x, y),
    )
    assert result.accuracy is not None
