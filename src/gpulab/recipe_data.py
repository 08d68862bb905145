"""The built-in recipes' options and data, NumPy only: both engines build mlp, digits and chargpt from here,
so they train on the same samples, and a TensorFlow run never imports torch for its data. The torch
recipes wrap these arrays with ``torch.from_numpy`` (no copy); TensorFlow's read them as they are.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from gpulab.config.schema import Settings
from gpulab.config.validate import parse_config
from gpulab.errors import ConfigError

Arrays = tuple[np.ndarray, np.ndarray]


class MlpOptions(Settings):
    samples: int = Field(10_000, ge=100, description="synthetic samples (80% train, 20% validation)")
    features: int = Field(20, ge=1, description="input features")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate")
    data_seed: int = Field(1234, description="seed of the synthetic data (fixed, unlike the training seed)")


def mlp_data(samples: int, features: int, seed: int) -> Arrays:
    """Labels from a fixed random hyperplane plus noise: learnable, not trivially separable. ``x`` is
    float32 ``(samples, features)``, ``y`` float32 ``(samples, 1)``."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((samples, features), dtype=np.float32)
    w = g.standard_normal(features, dtype=np.float32)
    noise = g.standard_normal(samples, dtype=np.float32)
    y = ((x @ w + 0.5 * noise) > 0).astype(np.float32)[:, None]
    return x, y


class DigitsOptions(Settings):
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (cosine-annealed to zero)")
    weight_decay: float = Field(1e-4, ge=0, description="AdamW weight decay")
    dropout: float = Field(0.25, ge=0, lt=1, description="dropout before the classifier")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="held-out share, stratified by class")
    split_seed: int = Field(0, description="seed of the train/validation split")


def digits_data(val_fraction: float, seed: int) -> tuple[Arrays, Arrays]:
    """scikit-learn's 8x8 digits split stratified by class: ``((x, y), (x_val, y_val))``, images float32
    ``(n, 1, 8, 8)`` (channels first, as torch's convolutions take them) in 0..1, labels int64."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / np.float32(16.0))[:, None]  # pixel values are 0..16
    y = digits.target.astype(np.int64)
    tr, va = train_test_split(np.arange(len(y)), test_size=val_fraction, random_state=seed, stratify=y)
    return (x[tr], y[tr]), (x[va], y[va])


class CharGptOptions(Settings):
    n_layer: int = Field(2, ge=1, description="transformer blocks")
    n_head: int = Field(4, ge=1, description="attention heads (must divide n_embd)")
    n_embd: int = Field(128, ge=8, description="embedding width")
    block_size: int = Field(64, ge=8, description="context length in characters")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout in attention output and MLP")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate")
    max_chars: int | None = Field(None, ge=1000, description="use only the first N characters of the text")
    chunked_loss: bool | Literal["auto"] = Field(
        "auto",
        description="torch: the cross-entropy over row chunks, never the whole logits (memory); auto is "
        "false until a GPU measures it faster (docs/PERF.md)",
    )


# The options of each built-in recipe (both engines' mlp, digits, chargpt), checked before either builds it.
OPTIONS: dict[str, type[Settings]] = {"mlp": MlpOptions, "digits": DigitsOptions, "chargpt": CharGptOptions}


def load_text() -> str:
    """The standard library's pydoc topics: ~460k characters of real English prose and code."""
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


def chargpt_text(options: dict) -> tuple[CharGptOptions, list[str], np.ndarray, int]:
    """The options checked, the vocabulary, the text as int64 ids and where validation starts."""
    o = parse_config(CharGptOptions, options, prefix="options.")
    if o.n_embd % o.n_head:
        raise ConfigError(f"chargpt: n_head={o.n_head} must divide n_embd={o.n_embd}")
    text = load_text()[: o.max_chars]
    vocab = sorted(set(text))
    lookup = {ch: i for i, ch in enumerate(vocab)}
    ids = np.array([lookup[ch] for ch in text], dtype=np.int64)
    return o, vocab, ids, int(0.9 * len(ids))


def windows(ids: np.ndarray, block: int) -> Arrays:
    """Non-overlapping windows (views of ``ids``); the target is the input shifted by one character."""
    n = (len(ids) - 1) // block
    return ids[: n * block].reshape(n, block), ids[1 : n * block + 1].reshape(n, block)
