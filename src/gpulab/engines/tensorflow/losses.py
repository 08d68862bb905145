"""A recipe's ``loss_fn`` as the step takes it: ``(y, output) -> per-example losses`` (shape [batch]).

One callable is taken as it is. A model of several outputs may have, as in ``model.compile``, a dict of
losses by output name (or a list, one per output in order), each a Keras loss, a loss's name (``"mse"``)
or a function, with ``loss_weights`` alike: the per-example loss is the weighted sum of the outputs'. A
Keras ``Loss`` is read unreduced (its ``call``), whatever its ``reduction``, so the batch mean is still
``compute_average_loss``'s over the global batch (several replicas add up to the large batch's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpulab.errors import ConfigError


def combined_loss(loss_fn: Any, loss_weights: Any, output: Any) -> Callable:
    """``(y, output) -> per-example losses`` for ``loss_fn``; ``output`` is one output of the model (a
    probe on one sample), whose structure a dict or list of losses must match."""
    if not isinstance(loss_fn, (Mapping, list, tuple)):  # one callable, taken as it is
        if loss_weights is not None:
            raise ConfigError(
                "loss_weights weigh a dict of losses, one per output (as model.compile takes them); with "
                "one loss_fn, weigh inside it or drop loss_weights"
            )
        return loss_fn
    names = output_names(output)
    losses = _by_name(loss_fn, names, "loss_fn")
    weights = _by_name(loss_weights, names, "loss_weights") if loss_weights is not None else {}
    per_output = {name: _per_example(loss) for name, loss in losses.items()}
    scale = {name: float(weights.get(name, 1.0)) for name in per_output}

    def loss(y: Any, out: Any) -> Any:
        import keras

        ys, outs = _named(y, names, "the target"), _named(out, names, "the output")
        terms = [scale[n] * keras.ops.cast(per_output[n](ys[n], outs[n]), "float32") for n in per_output]
        return keras.ops.sum(keras.ops.stack(terms), axis=0)

    return loss


def output_names(output: Any) -> list[str]:
    """A dict output's keys; a list's positions (``output0``...); one tensor: ``output``."""
    if isinstance(output, Mapping):
        return [str(k) for k in output]
    if isinstance(output, (list, tuple)):
        return [f"output{i}" for i in range(len(output))]
    return ["output"]


def _by_name(given: Any, names: list[str], what: str) -> dict[str, Any]:
    """A dict of ``what`` by output name, or a list of them in the outputs' order, as a dict by name."""
    if isinstance(given, Mapping):
        unknown = [str(k) for k in given if str(k) not in names]
        if unknown or (what == "loss_fn" and not given):
            raise ConfigError(
                f"{what} names output(s) {', '.join(unknown) or '(none)'}; the model's outputs are "
                f"{', '.join(names)}"
            )
        return {str(k): v for k, v in given.items()}
    if isinstance(given, Sequence) and not isinstance(given, str):
        if len(given) != len(names):
            raise ConfigError(
                f"{what} is a list of {len(given)} for a model of {len(names)} outputs ({', '.join(names)}); "
                "give one per output, or a dict by output name"
            )
        return dict(zip(names, given, strict=True))
    raise ConfigError(
        f"{what} is a {type(given).__name__}; give a dict by output name ({', '.join(names)}) or a list "
        "in the outputs' order"
    )


def _named(value: Any, names: list[str], what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        missing = [n for n in names if n not in value]
        if missing:
            raise ConfigError(
                f"{what} has no {', '.join(missing)}: the losses name outputs {', '.join(names)}"
            )
        return {n: value[n] for n in names}
    if isinstance(value, (list, tuple)) and len(value) == len(names):
        return dict(zip(names, value, strict=True))
    raise ConfigError(
        f"{what} is not one entry per output ({', '.join(names)}): give the target as a dict by output "
        "name or a tuple in the outputs' order"
    )


def _per_example(loss: Any) -> Callable:
    """One output's loss as ``(y, out) -> [batch]``: unreduced, extra axes averaged (a sequence's tokens),
    a scalar (a function that reduced already) spread over the batch."""
    import keras

    if isinstance(loss, str):
        loss = keras.losses.get(loss)
    if not callable(loss):
        raise ConfigError(f"a loss is a {type(loss).__name__}; give a Keras loss, its name or a function")
    # A Keras Loss unreduced (its call; __call__ reduces by its reduction), in its dtype as __call__ has it.
    fn, dtype = (loss.call, loss.dtype) if isinstance(loss, keras.losses.Loss) else (loss, None)

    def per_example(y: Any, out: Any) -> Any:
        ops = keras.ops
        values = fn(ops.convert_to_tensor(y, dtype), ops.convert_to_tensor(out, dtype))
        rank = len(values.shape)
        if rank == 0:
            return ops.ones((ops.shape(out)[0],), values.dtype) * values
        return ops.mean(values, axis=tuple(range(1, rank))) if rank > 1 else values

    return per_example
