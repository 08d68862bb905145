"""The cross-entropy of a linear head, ``cross_entropy(hidden @ weight.T, targets)``, chunk by chunk, so
that no more than one chunk's logits exist at a time (never the whole rows x vocabulary).

At GPT-2-small's shape (32 x 1024 rows, vocabulary 50304) the full logits are 3.3 GB in bf16 and twice that
in fp32 for the softmax; a chunk of 2048 rows is 206 MB. The way Liger-Kernel's fused linear
cross-entropy does it: each chunk's gradients (of the hidden rows and of the weight) are computed in the
forward, while its logits are at hand, and the backward only scales them by the incoming gradient. No
logits are recomputed, so the step does the same matmuls as the unchunked one.

Plain torch (matmuls, logsumexp, softmax), no custom kernel: it runs under bf16 autocast as the unchunked
head does (the matmuls in bf16, the softmax in fp32) and torch.compile traces it without a graph break.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

IGNORE_INDEX = -100  # F.cross_entropy's default: rows with this target count for nothing


class HeadInput(NamedTuple):
    """What a model returns instead of its logits when its loss is chunked: the rows its linear head
    would read, and the head's weight (vocabulary x hidden)."""

    hidden: torch.Tensor
    weight: torch.Tensor


MAX_CHUNKS = 16  # each chunk adds one pass over the weight's gradient; past 16 little memory is left to save


def chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Rows per chunk: a chunk's logits about as large as the hidden rows themselves (Liger-Kernel's rule),
    in at most ``MAX_CHUNKS`` chunks, rounded up to a power of two and at most ``rows``. A vocabulary no
    wider than the hidden size: one chunk. At GPT-2-small's 32 x 1024 rows: 16 chunks of 2048 rows."""
    chunks = min(MAX_CHUNKS, max(1, -(-vocab // hidden)))
    per = -(-rows // chunks)
    return max(1, min(rows, 1 << (per - 1).bit_length()))


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    rows: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(hidden, weight), targets)`` (mean over the targets not ``ignore_index``),
    ``rows`` rows of logits at a time (``chunk_rows`` when None)."""
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1)
    rows = rows or chunk_rows(h.shape[0], h.shape[1], weight.shape[0])
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(h, weight, t, rows, ignore_index)
    return _chunked(h, weight, t, rows, ignore_index, grads=False)[0]


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h, weight, t, rows: int, ignore_index: int) -> torch.Tensor:  # type: ignore[override]
        loss, grad_h, grad_w = _chunked(h, weight, t, rows, ignore_index, grads=True)
        ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    @once_differentiable  # the saved gradients are constants: a second derivative through them is an error
    def backward(ctx: Any, grad_loss: torch.Tensor):  # type: ignore[override]
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss.to(grad_h.dtype), grad_w * grad_loss.to(grad_w.dtype), None, None, None


def _chunked(
    h: torch.Tensor, weight: torch.Tensor, t: torch.Tensor, rows: int, ignore_index: int, *, grads: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The mean loss and, with ``grads``, its gradients with respect to ``h`` and ``weight``."""
    device = h.device.type
    # Under autocast the matmuls run in its dtype, as the unchunked head's do; the weight is cast once here,
    # not once per chunk.
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    w = weight if dtype is None else weight.to(dtype)
    count = (t != ignore_index).sum()  # no clamp: all rows ignored gives nan, as F.cross_entropy does
    total = torch.zeros((), device=h.device, dtype=torch.float32)
    grad_h = torch.empty_like(h) if grads else None
    grad_w = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if grads else None
    for start in range(0, h.shape[0], rows):
        hc, tc = h[start : start + rows], t[start : start + rows]
        hc = hc if dtype is None else hc.to(dtype)
        logits = F.linear(hc, w)
        z = logits.float()  # the softmax in fp32, as autocast runs cross_entropy
        keep = tc != ignore_index
        safe = torch.where(keep, tc, 0)  # a valid index to gather at; the row is masked out anyway
        lse = torch.logsumexp(z, dim=-1)
        picked = z.gather(1, safe[:, None]).squeeze(1)
        total = total + torch.where(keep, lse - picked, 0.0).sum()
        if grad_h is None or grad_w is None:
            continue
        # d loss / d logits = (softmax - one_hot(target)) / count, zero on ignored rows
        g = torch.exp(z - lse[:, None])
        g = g.scatter_add(1, safe[:, None], -torch.ones_like(lse)[:, None])
        g = (g * (keep / count)[:, None]).to(logits.dtype)  # what the unchunked backward multiplies with
        grad_h[start : start + rows] = torch.matmul(g, w)
        grad_w.add_(torch.matmul(g.t(), hc))  # summed over chunks in fp32
    loss = total / count
    if grad_h is None or grad_w is None:
        return loss, None, None
    return loss, grad_h, grad_w.to(weight.dtype)
