"""`chargpt`: a character-level GPT on English text that ships with Python (the pydoc topics).

Its size is a setting, so the same recipe is a 10-second CPU smoke test and a GPU throughput/MFU load:
``--set options.n_layer=12 --set options.n_embd=768 --set options.block_size=1024``.

``options.chunked_loss=true``: in training the model returns its head's input (``HeadInput``) instead of the
logits, and ``next_char_loss`` computes the cross-entropy chunk by chunk (``linear_cross_entropy.py``), so
a large vocabulary's logits never exist whole. ``auto`` is false: on a CPU only the memory is measured
(docs/PERF.md); it turns on where a GPU measures it faster. Evaluation always returns the logits.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.recipes.base import Recipe, param_count
from gpulab.engines.torch.linear_cross_entropy import HeadInput, linear_cross_entropy
from gpulab.recipe_data import CharGptOptions, chargpt_text, windows


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        # scaled_dot_product_attention picks flash/memory-efficient kernels on GPUs.
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
        return x + self.drop(self.mlp(self.ln2(x)))


def _init_weights(module: nn.Module) -> None:
    # GPT-2's init: small normal weights. PyTorch's default N(0, 1) embedding, tied to the output layer,
    # would start the loss near 19 instead of ln(vocab) ~ 4.6.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class CharGPT(nn.Module):
    def __init__(self, vocab: int, o: CharGptOptions):
        super().__init__()
        self.tok = nn.Embedding(vocab, o.n_embd)
        self.pos = nn.Embedding(o.block_size, o.n_embd)
        self.blocks = nn.ModuleList(Block(o.n_embd, o.n_head, o.dropout) for _ in range(o.n_layer))
        self.ln = nn.LayerNorm(o.n_embd)
        self.head = nn.Linear(o.n_embd, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.chunked_loss = o.chunked_loss is True  # auto: false until a GPU measures it faster
        self.apply(_init_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor | HeadInput:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        if self.chunked_loss and self.training:  # the loss applies the head, chunk by chunk
            # A view, not the parameter itself: tools that hook a module's outputs (FlopCounterMode's module
            # tracker, under `gpulab inspect`'s autograd.grad) refuse a leaf tensor.
            return HeadInput(self.ln(x), self.head.weight.view_as(self.head.weight))
        return self.head(self.ln(x))


def next_char_loss(output: torch.Tensor | HeadInput, targets: torch.Tensor) -> torch.Tensor:
    if isinstance(output, HeadInput):
        return linear_cross_entropy(output.hidden, output.weight, targets)
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


def make_windows(ids, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``recipe_data.windows`` (the TensorFlow recipe's samples) as tensors sharing the ids' memory."""
    x, y = windows(ids, block)
    return torch.from_numpy(x), torch.from_numpy(y)


def build(options: dict) -> Recipe:
    o, vocab, ids, cut = chargpt_text(options)
    model = CharGPT(len(vocab), o)
    n_params = param_count(model)
    return Recipe(
        model=model,
        train_data=make_windows(ids[:cut], o.block_size),
        val_data=make_windows(ids[cut:], o.block_size),
        loss_fn=next_char_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=o.lr, weight_decay=0.1),
        defaults={"epochs": 1, "batch_size": 32},
        # 6 * params * tokens is the standard training-FLOPs estimate (forward 2N, backward 4N per token).
        info={"parameters": n_params, "vocab": len(vocab), "flops_per_sample": 6 * n_params * o.block_size},
    )
