"""An encoder-decoder (a Hugging Face T5) exported without its decoder's input: told in one line.

Its ``forward`` makes ``decoder_input_ids`` from ``labels`` (shifted right), and an export withholds
``labels`` (a deployment has none), so the decoder gets nothing and every format failed in its own words
("You must specify exactly one of input_ids or inputs_embeds"), each pointing at another format. One
eager call on the export's example, before any format runs, tells it once, with what to pass instead."""

from __future__ import annotations

from typing import Any

import torch

from gpulab.engines.torch.runtime.signature import TARGET_KEY, Signature, forward_of
from gpulab.errors import ConfigError

DECODER_INPUTS = ("decoder_input_ids", "decoder_inputs_embeds")


def check_decoder_inputs(model: torch.nn.Module, signature: Signature, data: Any, example: tuple) -> None:
    """Raises the one line where ``forward`` takes ``decoder_input_ids`` and ``labels``, the export's
    inputs (``data.names``) hold no decoder input, and the model cannot run on them."""
    found = forward_of(model)
    named = set(found[1].parameters) if found else set()  # by name, whether or not it has **kwargs too
    if not {DECODER_INPUTS[0], TARGET_KEY} <= named or any(n in data.names for n in DECODER_INPUTS):
        return
    args, kwargs = ((), dict(zip(data.names, example, strict=True))) if data.keyword else (example, {})
    try:
        with torch.no_grad():
            model.eval()(*args, **kwargs)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        start = getattr(getattr(model, "config", None), "decoder_start_token_id", None)
        first_id = "" if start is None else f", starting with decoder_start_token_id {start}"
        inputs = ", ".join(data.names)
        raise ConfigError(
            f"{signature.name}'s decoder gets no input: its forward makes decoder_input_ids from labels, "
            f"which an export withholds (a deployment has none), and the inputs are {inputs} "
            f"({type(exc).__name__}: {first}); export with the decoder's input: --input FILE.npz holding "
            f"{inputs} and decoder_input_ids (the target shifted right{first_id}), or decoder_input_ids in "
            "the recipe's val_data"
        ) from None
