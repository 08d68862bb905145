"""Numeric policies: one small class per precision, registered by name.

A ``Precision`` owns everything that changes with the number format: the forward context (autocast),
backward (loss scaling), the optimizer step (skipping steps whose gradients overflowed), global math
flags (TF32), and its own checkpoint state (the loss scaler). The model's parameters always stay in
fp32 ("mixed" policies compute in a lower dtype inside autocast only), as Keras' ``mixed_bfloat16``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch

from gpulab import precisions
from gpulab.engines.torch import torch_private
from gpulab.engines.torch.devices import accelerator
from gpulab.errors import ConfigError, choices


class Precision:
    """The base policy: fp32 behaviour (no autocast, no scaling) that each policy overrides piecewise.

    Options a policy does not use (``init_scale`` for bf16, say) are accepted and ignored, so a caller
    can pass fp16 scaler settings along with ``"auto"`` without knowing what ``auto`` will pick.
    """

    name: ClassVar[str] = "fp32"
    compute_dtype: ClassVar[torch.dtype | None] = None

    def __init__(self, device_type: str = "cpu", **_unused: Any) -> None:
        self.device_type = device_type

    def setup(self) -> None:
        """Apply process-wide settings this policy needs (undone by ``teardown``)."""

    def teardown(self) -> None:
        """Restore whatever ``setup`` changed."""

    def autocast(self) -> AbstractContextManager:
        """Context for the forward pass and the loss."""
        return nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale; call before clipping or reading them."""

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore for policies without state."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, device_type={self.device_type!r})"


class FP32(Precision):
    """Plain fp32 everywhere: the reference every other policy is measured against."""

    name = "fp32"


class TF32(Precision):
    """fp32 storage, TF32 tensor-core matmuls/convolutions on Ampere+ (10 mantissa bits, ~8x faster).

    The flags are global to the process, so ``teardown`` puts back exactly what it found: a test or a
    second Runtime in the same process must not inherit them by accident.
    """

    name = "tf32"

    def __init__(self, device_type: str = "cpu", **unused: Any) -> None:
        super().__init__(device_type, **unused)
        self._saved: dict[str, Any] | None = None

    def setup(self) -> None:
        self._saved = _read_tf32_flags()
        if accelerator(self.device_type).tf32_units:
            # Only on GPUs: on a CPU "high" lets oneDNN use reduced-precision passes for fp32 matmuls,
            # which measured 5-8 % slower for the digits CNN step on a 2-core EPYC without AMX.
            torch.set_float32_matmul_precision("high")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def teardown(self) -> None:
        if self._saved is not None:
            _write_tf32_flags(self._saved)
            self._saved = None


def _read_tf32_flags() -> dict[str, Any]:
    saved = {
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul": torch.backends.cuda.matmul.allow_tf32,
        "cudnn": torch.backends.cudnn.allow_tf32,
    }
    # Newer torch also maps "high" onto oneDNN's CPU matmuls; older torch has no such knob.
    mkldnn_matmul = getattr(torch.backends.mkldnn, "matmul", None)
    if mkldnn_matmul is not None and hasattr(mkldnn_matmul, "fp32_precision"):
        saved["mkldnn_matmul"] = mkldnn_matmul.fp32_precision
    return saved


def _write_tf32_flags(saved: dict[str, Any]) -> None:
    # Order matters: set_float32_matmul_precision rewrites allow_tf32, so the flags come after it.
    torch.set_float32_matmul_precision(saved["matmul_precision"])
    torch.backends.cuda.matmul.allow_tf32 = saved["cuda_matmul"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn"]
    if "mkldnn_matmul" in saved:
        torch.backends.mkldnn.matmul.fp32_precision = saved["mkldnn_matmul"]


class _Autocast(Precision):
    """Shared by the mixed policies: fp32 weights, ``compute_dtype`` activations inside autocast."""

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(self.device_type, dtype=self.compute_dtype)


class BF16Mixed(_Autocast):
    """bfloat16 has fp32's exponent range, so gradients cannot underflow: no loss scaler needed."""

    name = "bf16-mixed"
    compute_dtype = getattr(torch, precisions.get(name).compute_dtype)


class FP16Mixed(_Autocast):
    """float16 with a dynamic loss scaler (fp16's narrow range would flush small gradients to zero).

    Steps whose gradients overflow are skipped by the scaler. They are counted on the device (comparing
    the scale tensor before and after ``update``: it only shrinks on an overflow), so counting costs no
    host sync per step; ``skipped_steps`` syncs once, when read.
    """

    name = "fp16-mixed"
    compute_dtype = getattr(torch, precisions.get(name).compute_dtype)

    def __init__(
        self,
        device_type: str = "cpu",
        *,
        init_scale: float = 2.0**16,
        growth_interval: int = 2000,
        **unused: Any,
    ) -> None:
        super().__init__(device_type, **unused)
        self.scaler = torch.amp.GradScaler(
            device_type, init_scale=init_scale, growth_interval=growth_interval
        )
        self._skipped: torch.Tensor | None = None  # created on the scale's device at the first step

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.step(optimizer)
        # update() rewrites the scale in place, so keep a copy, read without a host sync (the
        # public get_scale() would call .item() every step).
        before = torch_private.scale_without_sync(self.scaler).clone()
        self.scaler.update()
        shrunk = torch_private.scale_without_sync(self.scaler) < before
        if self._skipped is None:
            self._skipped = torch.zeros((), dtype=torch.long, device=shrunk.device)
        self._skipped.add_(shrunk)  # in place: a CUDA graph (cuda_graph) replays this very tensor

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps skipped for inf/NaN gradients so far (one host sync)."""
        return 0 if self._skipped is None else int(self._skipped.item())

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.scaler.load_state_dict(state)


# torch's class for each row of the precision table (gpulab.precisions; tests/test_precisions.py checks
# that every row has one).
PRECISIONS: dict[str, type[Precision]] = {cls.name: cls for cls in (FP32, TF32, BF16Mixed, FP16Mixed)}


def slow_precision_warning(precision: Precision, device: torch.device | str) -> str | None:
    """One line when ``precision`` computes in a dtype ``device`` only emulates (slow), else None."""
    from gpulab.hardware.native_dtypes import native_dtypes, slow_dtype_note

    spec = precisions.PRECISIONS.get(precision.name)
    dtype = spec.peak_dtype if spec is not None and spec.mixed else None
    if dtype is None or native_dtypes(device)[dtype] is not False:
        return None
    return (
        f"{precision.name} on {device}: {slow_dtype_note(dtype, device)}, often many times slower than fp32; "
        "use --precision fp32 (or auto)"
    )


def precision_choices() -> list[str]:
    return list(precisions.NAMES)


def resolve_precision(name: str, device: torch.device | str = "cpu", **options: Any) -> tuple[Precision, str]:
    """Build the policy called ``name`` (or the best one for ``device`` if ``"auto"``) and say why.

    ``options`` go to the policy's constructor (``init_scale``, ``growth_interval`` for fp16-mixed).
    """
    device = torch.device(device)
    if name == precisions.AUTO:
        name, reason = accelerator(device).auto_precision()
    else:
        reason = "requested"
    cls = PRECISIONS.get(name)
    if cls is None:
        raise ConfigError(f"unknown precision {name!r}; valid choices: {choices(precision_choices())}")
    return cls(device.type, **options), reason
