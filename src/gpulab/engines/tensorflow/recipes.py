"""The built-in recipes on TensorFlow: the torch recipes' data (``gpulab.recipe_data``, NumPy: no torch),
architecture and defaults, so a result on one engine compares with the other. Options are the torch
recipes' options.

Built models keep their output layer in float32 (``dtype="float32"``), as mixed precision needs.
"""

from __future__ import annotations

from typing import Any

from gpulab.config.validate import parse_config
from gpulab.engines.tensorflow.trainer import TfRecipe
from gpulab.errors import ConfigError, choices


def mlp(options: dict[str, Any]) -> TfRecipe:
    import keras

    from gpulab.recipe_data import MlpOptions, mlp_data

    o = parse_config(MlpOptions, options, prefix="options.")
    x, y = mlp_data(o.samples, o.features, o.data_seed)
    cut = int(0.8 * o.samples)

    def model() -> Any:  # 20-64-32-1, as torch's make_model
        return keras.Sequential(
            [
                keras.Input((o.features,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )

    bce = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=model,
        train_data=(x[:cut], y[:cut]),
        val_data=(x[cut:], y[cut:]),
        loss_fn=lambda y, out: bce(y, out),
        optimizer=lambda total_steps: keras.optimizers.Adam(learning_rate=o.lr),
        correct_fn=lambda y, out: keras.ops.equal(out[:, 0] > 0, y[:, 0] > 0.5),
        defaults={"epochs": 5, "batch_size": 64},
    )


def digits(options: dict[str, Any]) -> TfRecipe:
    import keras
    import numpy as np

    from gpulab.recipe_data import DigitsOptions, digits_data

    o = parse_config(DigitsOptions, options, prefix="options.")
    (xt, yt), (xv, yv) = digits_data(o.val_fraction, o.split_seed)
    # torch's NCHW -> TensorFlow's NHWC (channels last); the same pixels and labels.
    train = (np.ascontiguousarray(xt.transpose(0, 2, 3, 1)), yt)
    val = (np.ascontiguousarray(xv.transpose(0, 2, 3, 1)), yv)

    def model() -> Any:  # as torch's make_model: conv 32, conv 64, pool, dropout, 128, 10
        return keras.Sequential(
            [
                keras.Input((8, 8, 1)),
                keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(2),
                keras.layers.Flatten(),
                keras.layers.Dropout(o.dropout),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(10, dtype="float32"),
            ]
        )

    def optimizer(total_steps: int) -> Any:  # AdamW, cosine-annealed to zero over the fit
        schedule = keras.optimizers.schedules.CosineDecay(o.lr, decay_steps=max(total_steps, 1))
        return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=o.weight_decay)

    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=model,
        train_data=train,
        val_data=val,
        loss_fn=lambda y, out: ce(y, out),
        optimizer=optimizer,
        correct_fn=lambda y, out: keras.ops.equal(keras.ops.argmax(out, axis=-1), keras.ops.cast(y, "int64")),
        defaults={"epochs": 15, "batch_size": 64},
        info={
            "train_samples": len(yt),
            "val_samples": len(yv),
        },
    )


def chargpt(options: dict[str, Any]) -> TfRecipe:
    import keras

    from gpulab.recipe_data import chargpt_text, windows

    o, vocab, ids, cut = chargpt_text(options)
    if o.chunked_loss is True:
        raise ConfigError(
            "options.chunked_loss=true: the TensorFlow engine's chargpt computes the whole logits; set "
            "options.chunked_loss to auto or false, or train with --engine torch"
        )

    def model() -> Any:
        from gpulab.engines.tensorflow.chargpt_model import CharGPT

        return CharGPT(len(vocab), o)

    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return TfRecipe(
        model=model,
        train_data=windows(ids[:cut], o.block_size),
        val_data=windows(ids[cut:], o.block_size),
        # Per sequence: the mean over its tokens (compute_average_loss then averages the sequences), so the
        # loss is torch's cross-entropy over all tokens of equal-length windows.
        loss_fn=lambda y, out: keras.ops.mean(ce(y, out), axis=-1),
        optimizer=lambda total_steps: keras.optimizers.AdamW(learning_rate=o.lr, weight_decay=0.1),
        correct_fn=lambda y, out: keras.ops.equal(keras.ops.argmax(out, axis=-1), keras.ops.cast(y, "int64")),
        defaults={"epochs": 1, "batch_size": 32},
        info={"vocab": len(vocab)},
    )


RECIPES = {"mlp": mlp, "digits": digits, "chargpt": chargpt}


def load_tf_recipe(name: str, options: dict[str, Any] | None) -> TfRecipe:
    """A built-in TensorFlow recipe by name, or the user's ``package.module:function`` returning a
    ``TfRecipe`` (imported and called as torch's recipes are)."""
    if name in RECIPES:
        return RECIPES[name](dict(options or {}))
    if ":" not in name:
        raise ConfigError(
            f"recipe {name!r} is not available on engine 'tensorflow'; valid there: {choices(RECIPES)} or "
            "your own module:function returning a TfRecipe (or use --engine torch)"
        )
    from gpulab.core.recipes.base import call_user_recipe

    recipe = call_user_recipe(name, dict(options or {}))
    if not isinstance(recipe, TfRecipe):
        raise ConfigError(
            f"recipe {name!r} returned a {type(recipe).__name__}, not a TfRecipe "
            "(gpulab.engines.tensorflow.trainer); "
            "return a TfRecipe for --engine tensorflow, or use --engine torch"
        )
    return recipe
