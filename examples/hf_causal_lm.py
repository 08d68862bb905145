"""A Hugging Face causal LM (GPT-2 architecture) from a config: random init, no download, tiny by default.

    gpulab train examples.hf_causal_lm:build --max-steps 50 --set options.n_layer=4

The batch is a dict, passed as ``model(**batch)``; the model computes its own loss from ``labels``, so
there is no ``loss_fn`` and no wrapper class: checkpoints hold GPT2LMHeadModel's own weight names plus its
``config.json``, so ``GPT2LMHeadModel.from_pretrained(OUT/checkpoints/step-N)`` loads them.
"""

from pydoc_data.topics import topics  # ~460k characters of English that ship with Python

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from gpulab import Recipe


def build(options: dict) -> Recipe:
    tokens = torch.tensor(list("".join(topics.values()).encode()))  # bytes as tokens: a vocabulary of 256
    blocks = tokens[: len(tokens) // 64 * 64].view(-1, 64)  # 7,283 sequences of 64 tokens
    train, val = ({"input_ids": b, "labels": b} for b in (blocks[:-256], blocks[-256:]))  # labels: own loss
    size = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64} | options  # --set options.n_layer=4
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, bos_token_id=0, eos_token_id=0, **size))
    model.loss_type = "ForCausalLM"  # its class name names no loss: transformers warns, then picks this
    return Recipe(model, train, loss_fn=None, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), val_data=val)
