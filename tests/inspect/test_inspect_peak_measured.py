"""``gpulab inspect``'s predicted peak against the peak a real training run reaches on the CPU, for a
small chargpt and a GPT-2-like transformer written here (no Hugging Face): within 20 %.

The measurement is independent of the estimate's own counting (a dispatch mode over fake tensors):
torch.profiler's memory events are the CPU allocator's every allocation and free, kernels' scratch
buffers included, summed in time order over the real ``Trainer`` fit that ``gpulab train`` runs."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gpulab.engines.torch.runtime.memory_estimate import tensor_bytes
from gpulab.engines.torch.train.run import resolve_config
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.profiling.inspect import inspect_recipe

GPT2_LIKE = '''
import math
import torch
from torch import nn
from torch.nn import functional as F
from gpulab import Recipe


class Attention(nn.Module):
    """GPT-2's eager attention: explicit scores, a causal mask, softmax, dropout on the probabilities."""

    def __init__(self, width, heads, drop):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        probs = self.drop(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        return self.drop(self.out((probs @ v).transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    def __init__(self, width, heads, drop):
        super().__init__()
        self.ln1, self.ln2, self.attn = nn.LayerNorm(width), nn.LayerNorm(width), Attention(width, heads, drop)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width), nn.Dropout(drop)
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt2Like(nn.Module):
    """Token and position embeddings, blocks, a final norm, a head tied to the embedding; the loss of the
    next token computed by the model itself from ``labels`` (as a Hugging Face causal LM does)."""

    def __init__(self, vocab=256, width=64, heads=4, layers=2, context=64, drop=0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.drop = nn.Dropout(drop)
        self.blocks = nn.ModuleList(Block(width, heads, drop) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, input_ids, labels=None):
        x = self.drop(self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if labels is None:
            return {"logits": logits}
        shifted = logits[:, :-1].reshape(-1, logits.shape[-1])
        return {"loss": F.cross_entropy(shifted, labels[:, 1:].reshape(-1)), "logits": logits}


def build(options):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (1024, 64), generator=g)
    return Recipe(
        Gpt2Like(), {"input_ids": ids, "labels": ids.clone()}, loss_fn=None,
        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3),
    )
'''


def allocator_peak(fn) -> int:
    """The most bytes the CPU allocator held at once during ``fn`` beyond what it held before."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # The kineto results hold every allocation event; the public events() keeps only some of them.
    cpu = torch.autograd.DeviceType.CPU
    events = [
        e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type() == cpu
    ]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()  # negative for a free
        peak = max(peak, live)
    return peak


def measured_peak(user: dict, out) -> int:
    """The peak of ``gpulab train``'s fit as ``train/run.py`` builds it: the model (built before, its
    parameters held throughout) plus what the fit allocated at its highest."""
    config, recipe = resolve_config(dict(user))
    settings = config.model_dump(exclude={"recipe", "options", "resume", "overwrite"})
    trainer = Trainer(**{**settings, "out_dir": str(out)})
    model = recipe.model
    held = tensor_bytes([*model.parameters(), *model.buffers()])
    return held + allocator_peak(lambda: recipe.fit(trainer))


@pytest.mark.parametrize(
    "user",
    [
        {"recipe": "chargpt", "options": {"n_layer": 2, "n_embd": 64, "block_size": 32, "max_chars": 40_000}},
        {"recipe": "inspect_gpt2_like:build"},
    ],
    ids=["chargpt", "gpt2-like"],
)
def test_the_predicted_peak_is_within_20_percent_of_a_real_runs(user, tmp_path, monkeypatch):
    (tmp_path / "inspect_gpt2_like.py").write_text(textwrap.dedent(GPT2_LIKE))
    monkeypatch.syspath_prepend(str(tmp_path))
    user = {**user, "batch_size": 16, "device": "cpu", "precision": "fp32", "max_steps": 3}
    report = inspect_recipe(dict(user))
    predicted = report.memory.predicted_peak_bytes
    measured = measured_peak(user, tmp_path / "run")
    assert abs(predicted - measured) <= 0.2 * measured, (predicted, measured, report.memory.to_json())
    # The loader's shuffled copy of the epoch is part of the peak: without it the estimate falls short.
    assert report.memory.data_bytes > 0
