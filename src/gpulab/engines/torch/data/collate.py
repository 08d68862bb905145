"""Samples into a batch: torch's ``default_collate``, with dataclass samples collated like tuples (a
pytree) -- field by field, into an instance of the same class -- where torch's stops with a TypeError."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import default_collate

from gpulab.engines.torch.data.transfer import is_dataclass_instance


def collate(samples: Sequence[Any]) -> Any:
    """One batch of ``samples``: a dataclass's fields each collated (its class rebuilt around them), a
    dict's values likewise (a dataclass may sit inside one); everything else as ``default_collate``. A
    field None in every sample (an optional one, ``labels: Tensor | None = None``) stays None."""
    first = samples[0]
    if all(s is None for s in samples):
        return None
    if is_dataclass_instance(first):
        fields = [f.name for f in dataclasses.fields(first) if f.init]
        return type(first)(**{name: collate([getattr(s, name) for s in samples]) for name in fields})
    if isinstance(first, Mapping) and any(is_dataclass_instance(v) for v in first.values()):
        return {key: collate([s[key] for s in samples]) for key in first}
    return default_collate(samples)
