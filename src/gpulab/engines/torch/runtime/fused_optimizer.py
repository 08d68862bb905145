"""Switch torch's own Adam/AdamW/SGD to their fused kernels when the user left the choice to torch.

torch picks the ``foreach`` implementation on CUDA and the ``for``-loop one on the CPU unless told
``fused=True``: one kernel per parameter per operation (about ten for Adam), which for a small model is
most of the step. The fused kernels do the whole update of every parameter in one call, with the same
arithmetic (results agree to float rounding), and let fp16's GradScaler skip a step without a host sync.
This is what torchtitan and Hugging Face's Trainer default to; gpulab does it for the optimizer you pass.

It is only done where it is exactly what ``fused=True`` in the constructor would have given:
- a class from the list below (a subclass may override ``step``);
- every group left ``fused`` and ``foreach`` unset (None): an explicit choice is kept;
- no state yet (``step`` counters of an unfused optimizer live on the CPU, the fused kernels want them
  on the parameters' device), no ``differentiable``, no ``capturable``;
- every parameter a plain floating-point tensor on a device with the kernels (the seam's
  ``fused_optimizer``: the CPU and CUDA), not a DTensor (FSDP2 shards).
"""

from __future__ import annotations

import torch

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator

FUSED_CLASSES: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.SGD,
)


def use_fused_kernels(optimizer: torch.optim.Optimizer) -> str:
    """Turn on ``fused`` in ``optimizer``'s groups when allowed (see the module docstring); returns why
    it did or did not, for ``Runtime.describe()``."""
    name = type(optimizer).__name__
    reason = _why_not(optimizer)
    if reason is not None:
        return f"{name} as given ({reason})"
    for group in optimizer.param_groups:
        group["fused"] = True
    optimizer.defaults["fused"] = True
    # What the constructor does for fused=True: GradScaler then hands the kernel its scale and inf flag.
    torch_private.set_scaler_handoff(optimizer, True)
    return f"{name} with fused kernels (one call updates every parameter; fuse_optimizer: false keeps it)"


def match_loaded_groups(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict``: the saved groups' ``fused`` flags win (an exact resume keeps the kernels
    it was saved with), so the GradScaler hand-off must follow them. A checkpoint from an unfused
    optimizer would otherwise have fp16's scaler hand scale and inf flag to the for-loop kernel, which
    refuses them."""
    if type(optimizer) in FUSED_CLASSES:
        torch_private.set_scaler_handoff(optimizer, all(g.get("fused") for g in optimizer.param_groups))


def _why_not(optimizer: torch.optim.Optimizer) -> str | None:
    if type(optimizer) not in FUSED_CLASSES:
        return f"fused kernels are used for {', '.join(c.__name__ for c in FUSED_CLASSES)} only"
    if "fused" not in optimizer.defaults:
        return f"this torch's {type(optimizer).__name__} has no fused kernels"
    if optimizer.state:
        return "it already has state"
    for group in optimizer.param_groups:
        if group.get("fused") is not None or group.get("foreach") is not None:
            return "fused/foreach chosen explicitly"
        if group.get("differentiable") or group.get("capturable"):
            return "differentiable or capturable"
        for p in group["params"]:
            if type(p) not in (torch.Tensor, torch.nn.Parameter):
                return f"parameters of type {type(p).__name__}"
            if not accelerator(p.device).fused_optimizer or not p.is_floating_point():
                return f"a {p.dtype} parameter on {p.device.type}"
    return None
