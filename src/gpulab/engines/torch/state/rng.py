"""Every random number generator a training run draws from, captured and restored exactly.

The state is encoded with tensors, ints, floats, lists and one string only, so a checkpoint's
``state.pt`` holding it can be read back with ``torch.load(weights_only=True)``: no pickled Python
objects, nothing that runs code on load.

``restore_rng`` checks every entry *before* it sets any generator, so a malformed state leaves all of
them untouched and raises ``CheckpointError`` -- a resume that silently draws different numbers is the
failure this module exists to prevent, so it is never downgraded to a log line.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import torch

from gpulab.errors import CheckpointError

FORMAT = 1
_PY_WORDS = 625  # Mersenne Twister: 624 state words + the position
_NP_KEYS = 624
_KEYS = ("format", "python", "numpy", "torch", "cuda")


def capture_rng(cuda_devices: Sequence[int] | None = None) -> dict[str, Any]:
    """Snapshot Python ``random``, NumPy's global RandomState, torch CPU and CUDA devices.

    ``cuda_devices``: the indices of the devices this process uses (a rank's own GPU; ``[]`` on a CPU), so
    that the state can be restored onto the same rank's device on any machine; None: every visible one.
    """
    version, words, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    if cuda_devices is None:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    else:
        cuda = [torch.cuda.get_rng_state(index) for index in cuda_devices]
    own = {} if cuda_devices is None else {"cuda_devices": [int(i) for i in cuda_devices]}
    return {
        **own,
        "format": FORMAT,
        "python": {
            "version": int(version),
            "state": torch.tensor(words, dtype=torch.int64),
            # a list, not None: empty means "no cached Gaussian"
            "gauss_next": [] if gauss_next is None else [float(gauss_next)],
        },
        "numpy": {
            "bit_generator": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state().clone(),
        "cuda": [s.clone() for s in cuda],
    }


def restore_rng(
    state: dict[str, Any], *, strict_cuda: bool = True, cuda_devices: Sequence[int] | None = None
) -> None:
    """Put every generator back exactly as ``capture_rng`` found it.

    Raises ``CheckpointError`` for a missing or malformed entry, before any generator is touched.
    With ``strict_cuda`` (the default) a state captured on more CUDA devices than this process sees is an
    error too; ``strict_cuda=False`` restores the devices that exist and leaves the rest out.
    ``cuda_devices``: this process's own devices. A state captured for its own devices
    (``capture_rng(cuda_devices=...)``) goes onto them in order, whatever their index was at capture, so a
    single-GPU run resumes on a machine with fewer GPUs; from an every-device state each takes its index.
    """
    py, np_state, cpu, cuda = _checked(state, strict_cuda and cuda_devices is None)
    targets = _cuda_targets(state, cuda, cuda_devices)
    random.setstate(py)
    np.random.set_state(np_state)
    torch.set_rng_state(cpu)
    for index, device_state in targets:
        torch.cuda.set_rng_state(device_state, index)


def _cuda_targets(
    state: dict[str, Any], cuda: list[torch.Tensor], own: Sequence[int] | None
) -> list[tuple[int, torch.Tensor]]:
    """(device index, state) pairs to set; raises before anything is set when they cannot match."""
    saved = state.get("cuda_devices")
    well_formed = isinstance(saved, list) and all(type(i) is int for i in saved)
    if saved is not None and (not well_formed or len(saved) != len(state["cuda"])):
        _bad("rng.cuda_devices", "expected one int device index per entry of rng.cuda")
    if own is None:
        # cuda holds only the visible devices' states (strict_cuda=False trims the rest)
        return list(zip(saved, cuda, strict=False)) if saved is not None else list(enumerate(cuda))
    own = [int(i) for i in own]
    if saved is not None:  # captured per process: its states in order onto our own devices
        if cuda and len(cuda) != len(own):
            _bad("rng.cuda", f"holds {len(cuda)} device state(s) but this process uses {len(own)} device(s)")
        return list(zip(own, cuda, strict=True)) if cuda else []
    full = state["cuda"]  # every visible device, by index: ours must be among them
    missing = [i for i in own if i >= len(full)] if full else []
    if missing:
        _bad("rng.cuda", f"holds no state for cuda:{missing[0]} ({len(full)} device(s) were saved)")
    return [(i, full[i].cpu()) for i in own] if full else []


def validate_rng(state: Any, *, strict_cuda: bool = True, cuda_devices: Sequence[int] | None = None) -> None:
    """Raise ``CheckpointError`` if ``state`` is not a well-formed ``capture_rng()`` result (that
    ``restore_rng`` with the same ``cuda_devices`` could put back)."""
    _cuda_targets(state, _checked(state, strict_cuda and cuda_devices is None)[3], cuda_devices)


def _checked(state: Any, strict_cuda: bool) -> tuple[tuple, tuple, torch.Tensor, list[torch.Tensor]]:
    """Validate everything and return what the setters take; raise on the first problem."""
    if not isinstance(state, dict):
        _bad("rng", f"expected a dict from capture_rng(), got {type(state).__name__}")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        _bad("rng", f"missing {', '.join(missing)} (expected keys: {', '.join(_KEYS)})")
    if state["format"] != FORMAT:
        _bad("rng.format", f"{state['format']!r} is not a known format (expected {FORMAT})")
    return (
        _python_state(state["python"]),
        _numpy_state(state["numpy"]),
        _byte_tensor("rng.torch", state["torch"], torch.get_rng_state().numel()),
        _cuda_states(state["cuda"], strict_cuda),
    )


def _python_state(entry: Any) -> tuple:
    _need_keys("rng.python", entry, ("version", "state", "gauss_next"))
    words = _int_tensor("rng.python.state", entry["state"], _PY_WORDS, high=2**32)
    gauss = entry["gauss_next"]
    if not isinstance(gauss, list) or len(gauss) > 1 or not all(isinstance(g, float) for g in gauss):
        _bad("rng.python.gauss_next", "expected [] or [float]")
    if not isinstance(entry["version"], int):
        _bad("rng.python.version", "expected an int")
    return (entry["version"], tuple(words.tolist()), gauss[0] if gauss else None)


def _numpy_state(entry: Any) -> tuple:
    _need_keys("rng.numpy", entry, ("bit_generator", "keys", "pos", "has_gauss", "cached_gaussian"))
    if entry["bit_generator"] != "MT19937":
        _bad("rng.numpy.bit_generator", f"{entry['bit_generator']!r} is not MT19937")
    keys = _int_tensor("rng.numpy.keys", entry["keys"], _NP_KEYS, high=2**32)
    pos, has_gauss, cached = entry["pos"], entry["has_gauss"], entry["cached_gaussian"]
    if not isinstance(pos, int) or not 0 <= pos <= _NP_KEYS:
        _bad("rng.numpy.pos", f"expected an int in 0..{_NP_KEYS}, got {pos!r}")
    if has_gauss not in (0, 1) or not isinstance(cached, float):
        _bad("rng.numpy", "has_gauss must be 0|1 and cached_gaussian a float")
    return ("MT19937", keys.numpy().astype(np.uint32), pos, int(has_gauss), cached)


def _cuda_states(entry: Any, strict: bool) -> list[torch.Tensor]:
    if not isinstance(entry, list):
        _bad("rng.cuda", f"expected a list of per-device states, got {type(entry).__name__}")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if strict and len(entry) > visible:
        _bad(
            "rng.cuda",
            f"holds states for {len(entry)} CUDA device(s) but this process sees {visible}; "
            "resume on matching hardware or pass strict_cuda=False",
        )
    if not entry:
        return []
    size = torch.cuda.get_rng_state(0).numel() if visible else None
    states = [_byte_tensor(f"rng.cuda[{i}]", s, size) for i, s in enumerate(entry)]
    return states[:visible]


def _need_keys(where: str, entry: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(entry, dict):
        _bad(where, f"expected a dict, got {type(entry).__name__}")
    missing = [k for k in keys if k not in entry]
    if missing:
        _bad(where, f"missing {', '.join(missing)}")


def _int_tensor(where: str, value: Any, length: int, *, high: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.shape != (length,):
        _bad(where, f"expected an int64 tensor of shape ({length},)")
    if length and (int(value.min()) < 0 or int(value.max()) >= high):
        _bad(where, f"values must lie in 0..{high - 1}")
    return value


def _byte_tensor(where: str, value: Any, size: int | None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.dim() != 1:
        _bad(where, "expected a 1-D uint8 tensor")
    if size is not None and value.numel() != size:
        _bad(where, f"has {value.numel()} bytes, expected {size}")
    return value.cpu()


def _bad(where: str, what: str) -> NoReturn:
    raise CheckpointError(f"RNG state {where}: {what}")
