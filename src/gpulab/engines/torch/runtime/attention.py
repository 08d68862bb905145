"""``attention``: which kernel torch's ``scaled_dot_product_attention`` tries first.

``auto`` keeps torch's own order, which is the fast one: torch's SDPA dispatcher (``sdp_utils.cpp``,
``check_prefer_cudnn_attention``) puts cuDNN's attention first on Hopper and Blackwell when its cuDNN is
newer than 9.15 (older ones miscompute sequence lengths not divisible by 128, pytorch#169849), flash
attention first elsewhere. On an H100 (torch 2.11.0+cu130, 2026-11-27) cuDNN's forward + backward of
GPT-2-small's attention took 0.93 ms against flash's 1.36 ms, yet forcing cuDNN first moved the compiled
GPT-2-small step by nothing (68.2 ms against the hand loop's 67.7), most likely because torch had picked it
(``scripts/sdpa_kernel_check.py`` prints torch's pick to confirm). A kernel named here
is tried first, then the others in torch's order, so a shape or option it refuses still runs.

The order is process-wide in torch (a global the SDPA dispatcher reads, also when torch.compile traces the
model), so the Runtime sets it up with the precision's flags and its teardown restores what was there.
"""

from __future__ import annotations

from contextlib import ExitStack

from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
CHOICES = ("auto", *KERNELS)


class AttentionOrder:
    """The SDPA kernel order a Runtime applies: ``first`` tried first, then torch's order; None: torch's."""

    def __init__(self, first: str | None, reason: str) -> None:
        self.first, self.reason = first, reason
        self._stack: ExitStack | None = None

    @property
    def name(self) -> str:
        return self.first or "auto"

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


def resolve_attention(setting: str) -> AttentionOrder:
    """The order for ``attention: auto|flash|efficient|math|cudnn``."""
    if setting not in CHOICES:
        raise ValueError(f"attention {setting!r}: choose one of {', '.join(CHOICES)}")
    if setting == "auto":
        return AttentionOrder(None, "auto: torch's own order (cuDNN first on Hopper and newer, else flash)")
    return AttentionOrder(setting, f"{setting} first, as asked; then torch's order")
