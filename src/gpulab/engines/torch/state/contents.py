"""What may go into a torch checkpoint's state.pt, checked before anything is written.

``state.pt`` is read back with ``torch.load(weights_only=True)``, which refuses any pickled class it does
not know. Checking the same allowlist at save time turns "this checkpoint cannot be loaded" -- found
hours later, at resume -- into an error naming the offending key at the moment of saving.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from gpulab.engines.torch.state.rng import validate_rng
from gpulab.errors import CheckpointError

# Exact types: a subclass (a NumPy float, a namedtuple, a user's dict) pickles as its own class and would
# be refused on load, so isinstance is not enough.
_LEAVES = (str, int, float, bool, type(None), torch.dtype, torch.device, torch.Size)
_TENSORS = (torch.Tensor, torch.nn.Parameter)
_ALLOWED = "tensors, numbers, strings, lists, tuples, dicts and None"


def check_state_tree(value: Any, where: str = "state") -> None:
    """Raise ``CheckpointError`` naming the first value ``weights_only`` loading would refuse."""
    kind = type(value)
    if kind in _LEAVES or kind in _TENSORS:
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in (str, int):
                raise CheckpointError(
                    f"{where}: key {key!r} is a {type(key).__name__}; keys must be str or int"
                )
            check_state_tree(item, f"{where}[{key!r}]")
        return
    if kind in (list, tuple):
        for index, item in enumerate(value):
            check_state_tree(item, f"{where}[{index}]")
        return
    base = next((b for b in (str, bool, int, float, dict, list, tuple) if isinstance(value, b)), None)
    hint = f" (convert it with {base.__name__}(...))" if base else ""
    hint = " (convert it with .item())" if hasattr(value, "item") else hint
    raise CheckpointError(
        f"{where}: a {kind.__module__}.{kind.__qualname__} cannot be saved{hint}; allowed: {_ALLOWED}"
    )


def check_state(state: dict[str, Any]) -> None:
    """A torch checkpoint's ``state`` (after ``checkpoint.save.check_save_args``): every value loadable
    with ``weights_only``, and ``state["rng"]`` a well-formed ``capture_rng()`` for an exact resume."""
    check_state_tree(state)
    if "rng" not in state:
        raise CheckpointError("state has no 'rng' entry: pass state['rng'] = capture_rng() for exact resume")
    validate_rng(state["rng"], strict_cuda=False)


def weights_for_file(model_state: Any) -> dict[str, torch.Tensor]:
    """CPU, contiguous, detached copies safetensors accepts; tied (shared-storage) tensors are cloned.

    safetensors refuses two names over one storage; after loading, ``load_state_dict`` copies the same
    values into both tied parameters, so the tie survives a round trip.
    """
    if not isinstance(model_state, dict):
        raise CheckpointError(f"model_state: expected a dict of tensors, got {type(model_state).__name__}")
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model_state.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise CheckpointError(
                f"model_state[{name!r}]: expected str -> Tensor, got {type(tensor).__name__}"
            )
        tensor = tensor.detach().cpu().contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in seen:
            tensor = tensor.clone()
        elif storage:
            seen.add(storage)
        out[name] = tensor
    return out
