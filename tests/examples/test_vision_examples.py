"""examples/torchvision_resnet.py and examples/timm_vit.py train a few steps on CPU and the loss falls.

Skipped, with the reason, where the library does not load with this torch: PyPI's torchvision 0.28 (the
release for torch 2.13) is a CUDA build whose C++ ops fail to register with the CPU torch (``operator
torchvision::nms does not exist``), and timm imports torchvision at import time.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

from gpulab.train.recipes.base import load_recipe
from gpulab.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root


def require(module: str) -> None:
    """Skip unless ``module`` imports and runs here (an ImportError or a broken native build alike)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # torchvision's CUDA build raises RuntimeError at import on a CPU torch
        pytest.skip(f"{module} does not load with torch {torch.__version__}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize(
    ("example", "needs", "steps"),
    [("torchvision_resnet", "torchvision", 6), ("timm_vit", "timm", 40)],  # a ViT starts slower
)
def test_a_vision_example_trains_on_the_upscaled_digits(
    example, needs, steps, monkeypatch, tmp_path, one_thread
):
    require(needs)
    monkeypatch.syspath_prepend(str(ROOT))
    torch.manual_seed(0)
    recipe = load_recipe(f"examples.{example}:build", {})
    Trainer(
        device="cpu", precision="fp32", max_steps=steps, batch_size=32, log_every=1,
        out_dir=str(tmp_path), tensorboard=False, progress=False, mfu=False, checkpoints=False,
    ).fit(recipe.model, recipe.train_data, loss_fn=recipe.loss_fn, optimizer=recipe.optimizer)  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == steps
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1, losses


def test_the_upscaled_digits_are_rgb_images_of_the_asked_size(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from examples.vision_digits import upscaled_digits

    (x, y), (xv, yv) = upscaled_digits(32)
    assert x.shape[1:] == (3, 32, 32) and xv.shape[1:] == (3, 32, 32)
    assert len(x) == len(y) and len(xv) == len(yv) and len(x) + len(xv) == 1797
    assert x.min() >= 0.0 and x.max() <= 1.0
