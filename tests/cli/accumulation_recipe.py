"""Recipes for the accumulation-logging test (``accumulation_recipe:build`` for torch, ``:build_keras`` for
TensorFlow; not collected): 72 samples, so a batch of 16 leaves a short last batch of 8, and 4 x 4
micro-batches leave a short last window of 2. ``options.masked=true`` (torch): token labels partly -100 and
a loss declared a mean over items (``token_cross_entropy``), so micro-batches and steps hold different
numbers of items."""

from __future__ import annotations

SAMPLES, LENGTH, VOCAB = 72, 6, 11
DEFAULTS = {"epochs": 2, "log_every": 3, "tensorboard": False, "device": "cpu", "seed": 3}


def build(options: dict):
    import torch
    from torch import nn

    from gpulab.core.recipes.base import Recipe
    from gpulab.engines.torch.train.items import token_cross_entropy

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (SAMPLES, LENGTH), generator=g)
    y = (x * 3 + 1) % VOCAB
    if str(options.get("masked", "false")).lower() == "true":
        y = y.masked_fill(torch.rand(SAMPLES, LENGTH, generator=g) < 0.5, -100)  # 0 to 6 items a sample
        loss_fn = token_cross_entropy
    else:
        loss_fn = lambda out, target: nn.functional.cross_entropy(out.flatten(0, 1), target.flatten())  # noqa: E731
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB))
    return Recipe(model=model, train_data=(x, y), loss_fn=loss_fn,
                  optimizer=lambda p: torch.optim.SGD(p, lr=0.5), defaults=DEFAULTS)  # fmt: skip


def build_keras(options: dict):
    import keras
    import numpy as np

    from gpulab.engines.tensorflow.trainer import TfRecipe

    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, 8)).astype("float32")
    y = (x.sum(1) > 0).astype("int64")
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(2, dtype="float32")])  # fmt: skip

    return TfRecipe(model=model, train_data=(x, y), loss_fn=lambda y, out: ce(y, out),
                    optimizer=lambda total_steps: keras.optimizers.SGD(learning_rate=0.5),
                    defaults=DEFAULTS)  # fmt: skip
