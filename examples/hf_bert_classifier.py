"""A Hugging Face BERT classifier from a config: random init, no download, dict batches with padding.

    gpulab train examples.hf_bert_classifier:build --max-steps 60 --out runs/bert
    gpulab export runs/bert --format onnx        # input_ids + attention_mask, dynamic batch and length
    gpulab infer runs/bert/export/examples.hf_bert_classifier-build.onnx --recipe-data

Each sequence holds 4 to 24 tokens padded to 24 (``attention_mask`` 0 on the padding); its class is which
of three marker tokens it holds most often. The batch is a dict: ``input_ids``, ``attention_mask`` and
``labels``, passed by name to ``BertForSequenceClassification.forward``, which computes its own loss.
"""

import torch
from transformers import BertConfig, BertForSequenceClassification

from gpulab import Recipe

VOCAB, LENGTH, CLASSES = 48, 24, 3
MARKERS = torch.tensor([5, 6, 7])  # the class of a sequence: its most frequent marker


def sequences(n: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, VOCAB, (n, LENGTH), generator=g)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    where = torch.rand(n, LENGTH, generator=g) < 0.3
    ids = torch.where(where, MARKERS[labels][:, None], ids)
    lengths = torch.randint(4, LENGTH + 1, (n,), generator=g)
    mask = (torch.arange(LENGTH) < lengths[:, None]).long()
    ids = torch.where(mask.bool(), ids, torch.zeros_like(ids))  # 0: [PAD]
    ids[:, 0] = 1  # [CLS]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def build(options: dict) -> Recipe:
    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    config = BertConfig(
        vocab_size=VOCAB, max_position_embeddings=64, num_labels=CLASSES, pad_token_id=0, **(size | options)
    )
    model = BertForSequenceClassification(config)
    return Recipe(
        model,
        sequences(1024, seed=0),
        loss_fn=None,  # the model's own loss, from labels
        optimizer=lambda p: torch.optim.AdamW(p, lr=2e-3),
        val_data=sequences(256, seed=1),
    )
