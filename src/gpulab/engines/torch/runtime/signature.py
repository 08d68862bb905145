"""A model's signature, read once: which of a batch's parts are the model's arguments, and which part of
its output is the prediction. Training, validation, export, infer and inspect all ask here.

Arguments:

- a tuple/list batch ``(inputs..., target)``: the inputs, positionally;
- a dict (or dataclass) batch: the keys ``forward`` names as parameters, by keyword (a key it does not
  accept, ``labels`` for a model without its own loss, is left out); every key when ``forward`` takes
  ``**kwargs`` (it cannot say which it reads). ``inputs`` (the ``model_inputs`` setting) names exactly the
  keys to pass instead, when that rule guesses wrong.

Predictions (``output`` names a field to take instead: the ``model_output`` setting, ``--output``):
the output itself when it is a tensor, its ``logits`` (attribute or key), a tuple's first item, or a
mapping's only tensor.
"""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from gpulab.engines.torch.data.transfer import is_dataclass_instance
from gpulab.errors import ConfigError, DataError

TARGET_KEY = "labels"  # a dict batch's target: what a loss_fn(output, target) gets, never an export input


def as_mapping(batch: Any) -> Mapping | None:
    """A dict batch as it is, a dataclass as a dict of its fields; None for anything else."""
    if type(batch) is dict or isinstance(batch, Mapping):  # a plain dict skips the slower ABC check
        return batch
    if is_dataclass_instance(batch):
        return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return None


def forward_of(model: Callable) -> tuple[str, inspect.Signature] | None:
    """(the model's class name, its ``forward``'s signature), looking through DDP/compile wrappers."""
    from torch import nn

    from gpulab.engines.torch.runtime.memory_estimate import unwrap_module

    module = unwrap_module(model) if isinstance(model, nn.Module) else model
    target = module.forward if isinstance(module, nn.Module) else module
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    name = type(module).__name__ if isinstance(module, nn.Module) else getattr(target, "__name__", "")
    return name, signature


class Signature:
    """How one model is called and read: ``arguments(batch)`` and ``predictions(output)``."""

    def __init__(
        self, model: Callable, inputs: Sequence[str] | None = None, output: str | None = None
    ) -> None:
        found = forward_of(model)
        self.name = found[0] if found else type(model).__name__
        params = found[1].parameters if found else {}
        kinds = {p.kind for p in params.values()}
        # None: every key goes (no signature to read, or a **kwargs that may read any of them).
        self.accepted: frozenset[str] | None = (
            None
            if found is None or inspect.Parameter.VAR_KEYWORD in kinds
            else frozenset(n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL)
        )
        self.inputs = tuple(inputs) if inputs else None
        self.output = output
        self.text = f"{self.name}.forward{found[1]}" if found else self.name

    def keywords(self, mapping: Mapping) -> dict[str, Any]:
        """The keys of a dict batch passed to ``forward``, by the rule of the module docstring."""
        if self.inputs is not None:
            missing = [k for k in self.inputs if k not in mapping]
            if missing:
                raise DataError(
                    f"model_inputs names {missing}, which the batch (keys {list(mapping)}) does not hold; "
                    "name keys the batch has, or leave model_inputs unset to pass what forward accepts"
                )
            return {k: mapping[k] for k in self.inputs}
        if self.accepted is None:
            return dict(mapping)
        return {k: v for k, v in mapping.items() if k in self.accepted}

    def left_out(self, batch: Any) -> list[str]:
        """The keys of a dict batch that ``forward`` does not get."""
        mapping = as_mapping(batch)
        if mapping is None:
            return []
        passed = self.keywords(mapping)
        return [k for k in mapping if k not in passed]

    def arguments(self, batch: Any) -> tuple[tuple, dict[str, Any]]:
        """``(args, kwargs)`` for ``forward``: a tuple's inputs, or a dict's keys it accepts."""
        if isinstance(batch, (tuple, list)):  # tuples first: the common case, one isinstance
            return tuple(batch[:-1]), {}
        mapping = as_mapping(batch)
        return (), self.keywords(mapping) if mapping is not None else {}

    def input_names(self, batch: Any) -> list[str]:
        """The names a served model's inputs get: a dict batch's keys passed to ``forward`` (its target
        ``labels`` left out: a deployment has none), ``input`` / ``input0..`` for a tuple's inputs."""
        mapping = as_mapping(batch)
        if mapping is None:
            n = len(batch) - 1
            return ["input"] if n == 1 else [f"input{i}" for i in range(n)]
        names = [k for k in self.keywords(mapping) if k != TARGET_KEY or self.inputs]
        return [k for k in names if isinstance(mapping[k], torch.Tensor)]

    def predictions(self, output: Any) -> torch.Tensor:
        """The tensor a deployment serves and accuracy is read from (module docstring); a ConfigError
        naming the output's fields when there is none."""
        found = self.find_predictions(output)
        if found is None:
            fields = list(output.keys()) if isinstance(output, Mapping) else type(output).__name__
            raise ConfigError(
                f"cannot tell the predictions in {self.name}'s output ({fields}): "
                + (
                    f"it has no tensor {self.output!r}"
                    if self.output
                    else "it is no tensor and has no 'logits'"
                )
                + "; name the field with model_output=NAME (--output NAME for export)"
            )
        return found

    def find_predictions(self, output: Any) -> torch.Tensor | None:
        if self.output is not None:
            found = field(output, self.output)
            return found if isinstance(found, torch.Tensor) else None
        if isinstance(output, torch.Tensor):
            return output
        logits = field(output, "logits")
        if isinstance(logits, torch.Tensor):
            return logits
        if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
            return output[0]
        if isinstance(output, Mapping):
            tensors = [v for v in output.values() if isinstance(v, torch.Tensor)]
            if len(tensors) == 1:
                return tensors[0]
        return None


def field(output: Any, name: str) -> Any:
    """``output.name`` or ``output[name]`` (a ``ModelOutput`` is both), else None."""
    if isinstance(output, Mapping):
        return output.get(name)
    return getattr(output, name, None)


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def signature_of(forward: Callable) -> Signature:
    """The default ``Signature`` of ``forward``, read once per model object (a call costs a lookup)."""
    try:
        found = _CACHE.get(forward)
    except TypeError:  # not weakly referenceable: read it each time
        return Signature(forward)
    if found is None:
        found = Signature(forward)
        _CACHE[forward] = found
    return found
