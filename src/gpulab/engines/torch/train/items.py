"""Losses that are a mean over items (tokens not equal to ``-100``), and the count that makes accumulation
and several ranks give the large batch's gradient.

A micro-batch's mean loss ``L_i`` over its ``n_i`` items is backpropagated as ``L_i * n_i`` (its sum), and
at the optimizer step the gradients are scaled by ``W / N``, ``N`` the items of the whole effective batch
(every micro-batch of the window on every rank: one all-reduce of one number per step, on the device)
and ``W`` the ranks (DDP's gradient all-reduce averages them). Without the count, averaging micro-batch
means weighs a micro-batch of few tokens like one of many: Hugging Face's ``num_items_in_batch``.

Where it applies (``item_counter``): a loss function that declares its count (``mean_over_items``;
``token_cross_entropy`` is one), and a Hugging Face model's own loss (the labels not equal to ``-100``,
shifted by one for a causal LM, as its loss counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.runtime.step_call import IGNORE_INDEX, target_of

Counter = Callable[[Any], torch.Tensor]


def mean_over_items(count: Counter) -> Callable[[Callable], Callable]:
    """Declare that a ``loss_fn`` is a mean over ``count(batch)`` items (a device tensor), so gpulab
    weighs micro-batches and ranks by it::

        @mean_over_items(lambda batch: (batch["labels"] != -100).sum())
        def loss_fn(output, target): ...
    """

    def declare(loss_fn: Callable) -> Callable:
        loss_fn.items_in = count  # type: ignore[attr-defined]
        return loss_fn

    return declare


def labelled(target: Any, shift: bool = False) -> torch.Tensor:
    """The items a mean over labels counts: class labels not equal to -100 (from position 1 for a loss
    that shifts them), or the rows of a float target."""
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"cannot count the items of a target of type {type(target).__name__}")
    if target.is_floating_point():
        return torch.tensor(float(target.shape[0]), device=target.device)
    if shift and target.dim() >= 2:
        target = target[..., 1:]
    return (target != IGNORE_INDEX).sum()


@mean_over_items(lambda batch: labelled(target_of(batch)))
def token_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the tokens whose label is not -100, their mean; ``logits`` ``(..., classes)``."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX
    )


def item_counter(model: Any, loss_fn: Callable | None, shift: bool) -> Counter | None:
    """How to count a batch's items for this fit, or None (each micro-batch weighs the same)."""
    declared = getattr(loss_fn, "items_in", None)
    if callable(declared):
        return declared
    if loss_fn is None and any(c.__module__.startswith("transformers.") for c in type(model).__mro__):
        return lambda batch: labelled(target_of(batch), shift)
    return None


def scale_gradients(params: Any, factor: torch.Tensor) -> None:
    """Every gradient times ``factor`` (a device scalar: no host read)."""
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch_private.multiply_each(grads, factor.to(grads[0].dtype))
