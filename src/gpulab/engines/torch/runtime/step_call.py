"""How the Trainer calls the model and the loss: the one place that knows the shape of a batch.

=======================================  ==================================================================
batch                                    model call / target
=======================================  ==================================================================
tuple or list ``(inputs..., target)``    ``model(*inputs)``; target = the last item (a namedtuple too)
dict (any ``Mapping``)                   ``model(**keys)``; target = ``batch["labels"]`` if present
dataclass                                as a dict of its fields
=======================================  ==================================================================

The loss, in this order:

- ``loss_fn`` given, with a parameter named ``batch``: ``loss_fn(output, batch)`` (a masked loss, a loss
  that needs an input); otherwise ``loss_fn(output, target)``.
- no ``loss_fn``: the loss the model computed itself: ``output.loss`` or ``output["loss"]`` (a Hugging
  Face model returns one when the batch holds ``labels``).

Validation accuracy compares the logits (``output.logits`` / ``output["logits"]``, or the output itself
when it is a tensor) with the target, position by position; label ``-100`` (ignored by the usual losses)
is not counted. A Hugging Face causal LM shifts its labels inside its own loss (the logits at position t
predict the label at t+1), so its accuracy is read shifted likewise: unshifted, a model with tied
embeddings scores ~90 % before training by echoing its input.
Which keys of a dict go to ``forward`` (those it accepts, or the ``model_inputs`` setting) and which part
of the output is the prediction (``model_output``) is ``runtime/signature.py``'s rule.
Nothing here renames or wraps the user's model, so its saved weights keep their names.
A batch that does not fit the model's ``forward`` is a DataError naming its keys and the signature.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from gpulab.engines.torch.data.transfer import batch_size_of, is_dataclass_instance
from gpulab.engines.torch.runtime.signature import Signature, as_mapping, forward_of, signature_of
from gpulab.errors import ConfigError, DataError

ACCEPTED_BATCHES = "a tuple/list (inputs..., target), a dict of model arguments, or a dataclass"
IGNORE_INDEX = -100  # the label the usual losses (and Hugging Face models) skip


def check_batch(batch: Any) -> Any:
    """``batch`` if the Trainer can call a model with it, else a DataError saying what it accepts."""
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch
    if isinstance(batch, Mapping) and batch:
        return batch
    if is_dataclass_instance(batch):
        return batch
    size = f" of length {len(batch)}" if hasattr(batch, "__len__") else ""
    raise DataError(
        f"cannot call the model with a batch of type {type(batch).__name__}{size}; each batch must be "
        f"{ACCEPTED_BATCHES} (a single tensor: make the dataset return (inputs, target))"
    )


def call_model(forward: Callable, batch: Any, signature: Signature | None = None) -> Any:
    """The model's output on ``batch``: ``forward(*inputs)`` for a tuple, ``forward(**keys)`` for a dict
    (the keys ``signature`` passes: see ``runtime/signature.py``).

    A batch that does not fit the model's ``forward`` (a missing or extra key) is a DataError naming the
    keys and the signature; the check runs only once the call failed, so it costs a step nothing."""
    args, kwargs = (signature or signature_of(forward)).arguments(batch)
    try:
        return forward(*args, **kwargs)
    except Exception as exc:
        hint = _mismatch(forward, args, kwargs) if isinstance(exc, TypeError) else None
        # A misbound argument fails as a wrong type (a Tensor where a cache object belongs); shape and
        # value errors are more often the model's own, and keep their traceback.
        if hint is None and len(args) >= 2 and isinstance(exc, (TypeError, AttributeError)):
            hint = _positional_hint(forward, args, exc)
        if hint is None:  # the arguments fit: the error came from inside the model
            raise
        raise DataError(hint) from exc


_as_mapping = as_mapping
_signature_of = forward_of


def _mismatch(forward: Callable, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """Why ``args``/``kwargs`` cannot bind to the user's ``forward``, or None when they can (or when
    there is no signature to read)."""
    found = _signature_of(forward)
    if found is None:
        return None
    name, signature = found
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"keys {list(kwargs)}" if kwargs else f"{len(args)} input(s) (the last item is the target)"
        return (
            f"the batch ({given}) does not fit {name}.forward{signature}: {exc}; make each batch hold "
            "forward's arguments (a dict's keys forward does not name are left out unless model_inputs "
            "lists them: set model_inputs to the keys forward takes, --set 'model_inputs=[...]')"
        )
    return None


def _positional_hint(forward: Callable, args: tuple, exc: Exception) -> str | None:
    """For a tuple batch whose second or later input went positionally into an optional parameter of
    ``forward`` (a Hugging Face model's ``(input_ids, past_key_values, ...)``) and the call failed: the
    binding, the error, and the dict batch that names each argument. None when the inputs bound to
    required parameters (then the model's own error stands)."""
    found = _signature_of(forward)
    if found is None:
        return None
    name, signature = found
    try:
        bound = list(signature.bind_partial(*args).arguments)
    except TypeError:
        return None
    params = signature.parameters
    optional = [n for n in bound[1:] if params[n].default is not inspect.Parameter.empty]
    if not optional:
        return None
    first = (str(exc).splitlines() or [""])[0][:160]
    return (
        f"{name}.forward failed ({type(exc).__name__}: {first}) with the batch's {len(args)} inputs passed "
        f"positionally as ({', '.join(bound)}); if they are meant as other arguments, make each batch a "
        "dict naming them (e.g. {'input_ids': ..., 'attention_mask': ..., 'labels': ...}), passed as "
        "keyword arguments (--debug shows the model's traceback)"
    )


def _swallowed_keys(forward: Callable, batch: Any) -> str:
    """For a dict batch given to a ``forward(..., **kwargs)``: the keys that are none of its named
    parameters (a typo such as ``lables`` vanishes into ``**kwargs``), with the nearest names; or ''."""
    import difflib

    kwargs, found = _as_mapping(batch), _signature_of(forward)
    if not kwargs or found is None:
        return ""
    name, signature = found
    named = [n for n, p in signature.parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    stray = [k for k in kwargs if k not in named]
    if not stray:
        return ""
    near = {k: difflib.get_close_matches(k, named, n=1) for k in stray}
    guesses = ", ".join(f"{k!r} -> {m[0]!r}?" for k, m in near.items() if m)
    # No **kwargs: the stray keys were left out of the call (runtime/signature.py).
    fate = "its **kwargs took them" if len(named) < len(signature.parameters) else "they were left out"
    return f"; the batch's keys {stray} are not named parameters of {name}.forward ({fate})" + (
        f": {guesses}" if guesses else ""
    )


def target_of(batch: Any) -> Any:
    """What a ``loss_fn(output, target)`` and accuracy compare with: a tuple's last item, a dict's
    ``labels`` (None when it has none)."""
    if isinstance(batch, (tuple, list)):
        return batch[-1]
    kwargs = _as_mapping(batch)
    return kwargs.get("labels") if kwargs is not None else None


def samples_in(batch: Any) -> int:
    """Samples in ``batch``: the leading dimension of its target, else of its first tensor."""
    target = target_of(batch)
    return batch_size_of(target if isinstance(target, torch.Tensor) else batch)


def output_field(output: Any, name: str) -> Any:
    """``output.name`` or ``output[name]`` (a ``ModelOutput`` is both), else None."""
    if isinstance(output, Mapping):
        return output.get(name)
    return getattr(output, name, None)


def wants_batch(loss_fn: Callable | None) -> bool:
    """Whether ``loss_fn`` takes the whole batch: it has a parameter named ``batch``."""
    if loss_fn is None:
        return False
    try:
        parameters = inspect.signature(loss_fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the usual (output, target)
        return False
    return "batch" in parameters


class LossCall:
    """``loss(output, batch) -> scalar``: the rule of the module docstring, decided once per fit."""

    def __init__(self, loss_fn: Callable | None, signature: Signature | None = None) -> None:
        if loss_fn is not None and not callable(loss_fn):
            raise ConfigError(
                f"loss_fn must be callable (output, target) or (output, batch), got {type(loss_fn).__name__}"
            )
        self.loss_fn = loss_fn
        self.takes_batch = wants_batch(loss_fn)
        self.signature = signature  # None: forward's own (signature_of), read on the first call

    def __call__(self, output: Any, batch: Any) -> torch.Tensor:
        if self.loss_fn is None:
            return _own_loss(output)
        if self.takes_batch:
            return self.loss_fn(output, batch)
        target = target_of(batch)
        if target is None:
            raise DataError(
                f"loss_fn(output, target) needs a target, but the batch (keys {list(_as_mapping(batch))}) "
                "has no 'labels': add labels to the batch, or name loss_fn's second parameter 'batch' to "
                "receive the whole batch"
            )
        return self.loss_fn(output, target)


def _own_loss(output: Any) -> torch.Tensor:
    loss = output_field(output, "loss")
    if isinstance(loss, torch.Tensor):
        return loss
    raise ConfigError(
        f"no loss: loss_fn is None and the model's output ({type(output).__name__}) carries no 'loss'; "
        "pass loss_fn=..., or give the model what makes it compute one (e.g. labels in the batch)"
    )


def loss_route(forward: Callable, loss: LossCall) -> Callable[[Any], torch.Tensor]:
    """``batch -> loss``: one forward and the loss (under the caller's autocast), the route chosen once. A
    compiled model whose loss is fused (``CompileFallback.fuse_loss``) computes both in one compiled
    region; any other forward is called, then ``loss`` takes its output."""
    if getattr(forward, "fuses_loss", False):
        return functools.partial(_fused_step_loss, forward, loss)
    return functools.partial(_plain_step_loss, forward, loss)


def step_loss(forward: Callable, loss: LossCall, batch: Any) -> torch.Tensor:
    """``loss_route(forward, loss)(batch)``, for what takes one loss outside a step (inspect, FLOPs)."""
    return loss_route(forward, loss)(batch)


def _fused_step_loss(forward: Any, loss: LossCall, batch: Any) -> torch.Tensor:
    if not forward.fuses_loss:  # fell back to eager since (a compile error): the plain call names bad batches
        return _plain_step_loss(forward, loss, batch)
    args, kwargs = (loss.signature or signature_of(forward)).arguments(batch)
    try:
        return forward.model_and_loss(args, kwargs, batch, loss)
    except (TypeError, AttributeError):
        # The eager path names a batch that does not fit forward (a DataError) where the compiled one
        # would show the compiler's traceback; a model's own error is raised again as it was.
        _plain_step_loss(forward.model, loss, batch)
        raise


def _plain_step_loss(forward: Callable, loss: LossCall, batch: Any) -> torch.Tensor:
    output = call_model(forward, batch, loss.signature)
    try:
        return loss(output, batch)
    except ConfigError as exc:  # no loss: say which keys forward's **kwargs swallowed (a 'lables' typo)
        swallowed = _swallowed_keys(forward, batch) if loss.loss_fn is None else ""
        if not swallowed:
            raise
        raise ConfigError(f"{exc}{swallowed}") from None


def loss_step(
    model: Any, loss_fn: Callable | None, inputs: Any = None, output: str | None = None
) -> Callable[[Callable, Any], torch.Tensor]:
    """``(forward, batch) -> loss`` by the Trainer's rule, for what runs a step outside the Trainer
    (inspect's trace, the memory estimate, tune's batch search): ``model``'s own ``forward`` (and the
    ``model_inputs``/``model_output`` settings) decides what of a batch it gets, whatever wrapper calls it."""
    loss = LossCall(loss_fn, Signature(model, inputs, output))
    return lambda forward, batch: step_loss(forward, loss, batch)


def logits_of(output: Any) -> Any:
    """The predictions accuracy is read from: the output tensor, or its ``logits``."""
    if isinstance(output, torch.Tensor):
        return output
    return output_field(output, "logits")


def shifts_labels(model: Any) -> bool:
    """Whether ``model`` is (or subclasses) a model Hugging Face lists as a causal LM: its own loss
    compares the logits at position t with the label at t+1."""
    if not any(cls.__module__.startswith("transformers.") for cls in type(model).__mro__):
        return False  # not a transformers model: transformers is not imported for it
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update([value] if isinstance(value, str) else value)
    return any(cls.__name__ in names for cls in type(model).__mro__)


def accuracy_counts(
    output: Any, batch: Any, *, shift: bool = False, signature: Signature | None = None
) -> tuple[torch.Tensor, torch.Tensor | int] | None:
    """(right predictions, predictions counted), both kept on the device where they are tensors (no
    host sync per batch); None when accuracy has no meaning here (no logits or no target, or shapes
    that are neither class scores nor binary logits), and nothing counted for a batch of float targets
    that are not probabilities (a regression's). ``shift``: a causal LM's logits at t against
    the label at t+1 (see ``shifts_labels``)."""
    from gpulab.engines.torch.runtime.metrics import correct_count

    logits = signature.find_predictions(output) if signature is not None else logits_of(output)
    target = target_of(batch)
    if shift and isinstance(logits, torch.Tensor) and isinstance(target, torch.Tensor) and target.dim() >= 2:
        logits, target = logits[..., :-1, :], target[..., 1:]
    right = correct_count(logits, target)
    if right is None:
        return None
    if not target.is_floating_point():  # class indices: an argmax is never -100, so just do not count them
        return right, (target != IGNORE_INDEX).sum()
    count = target.numel() if target.dim() > 1 and target.shape[-1] != 1 else batch_size_of(target)
    # Float targets are labels where they are probabilities (0/1, or smoothed): a regression's targets
    # outside [0, 1] make "accuracy" meaningless, so such a batch counts nothing (a device flag, no sync).
    labels = ((target >= 0) & (target <= 1)).all()
    return right * labels, labels * count
