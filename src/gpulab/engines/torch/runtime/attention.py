"""``attention``: which kernel torch's ``scaled_dot_product_attention`` tries first.

torch tries flash attention first on every CUDA GPU (its order: flash, memory-efficient, math, cuDNN). On
Hopper and newer, cuDNN's fused attention kernel is the faster one (``scripts/sdpa_kernel_check.py`` times
both on the GPU; docs/PERF.md has the figures), so ``auto`` puts cuDNN first there. Any other choice
puts that kernel first; a shape or option a kernel refuses falls back in torch's order, as with torch's own.

The order is process-wide in torch (a global the SDPA dispatcher reads, also when torch.compile traces the
model), so the Runtime sets it up with the precision's flags and its teardown restores what was there.
"""

from __future__ import annotations

from contextlib import ExitStack

from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab.engines.torch.runtime.devices import accelerator

KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}  # in torch's own order
CHOICES = ("auto", "torch", *KERNELS)


class AttentionOrder:
    """The SDPA kernel order a Runtime applies: ``first`` tried first, then torch's order; None: torch's."""

    def __init__(self, first: str | None, reason: str) -> None:
        self.first, self.reason = first, reason
        self._stack: ExitStack | None = None

    @property
    def name(self) -> str:
        return self.first or "torch"

    def setup(self) -> None:
        if self.first is None or self._stack is not None:
            return
        order = [KERNELS[self.first], *(k for name, k in KERNELS.items() if name != self.first)]
        self._stack = ExitStack()
        self._stack.enter_context(sdpa_kernel(order, set_priority=True))

    def teardown(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def resolve_attention(setting: str, device) -> AttentionOrder:
    """The order for ``attention: auto|torch|cudnn|flash|efficient|math`` on ``device``."""
    if setting not in CHOICES:
        raise ValueError(f"attention {setting!r}: choose one of {', '.join(CHOICES)}")
    if setting == "torch":
        return AttentionOrder(None, "torch's own order (flash attention first on a GPU)")
    if setting != "auto":
        return AttentionOrder(setting, f"{setting} first, as asked; then torch's order")
    first = accelerator(device).attention_first()
    if first is None:
        return AttentionOrder(None, "auto: torch's own order on this device")
    return AttentionOrder(first, f"auto: {first} attention first on this GPU, where it is the faster kernel")
