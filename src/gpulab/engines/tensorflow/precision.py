"""Precisions on TensorFlow, named as on torch.

``fp32``: float32, TensorFloat-32 off (as torch's fp32: full float32 matmuls). ``tf32``: float32 with
TensorFloat-32 matmuls on (Ampere+ GPUs; no effect on a CPU). ``bf16-mixed``: Keras policy
``mixed_bfloat16``. ``fp16-mixed``: ``mixed_float16`` with a ``LossScaleOptimizer`` whose initial scale and
growth interval are torch's GradScaler settings (``init_scale``, ``growth_interval``): a step with inf/NaN
gradients is skipped and the scale halved. The recipes keep their output layer in float32 either way.
``auto``: ``precisions.auto`` on the device's facts, the rule torch's auto follows too (bf16-mixed where the
GPU computes bfloat16 natively, fp16-mixed where only float16, else fp32).
Keras's policy and TF32 are process-wide: ``applied`` sets them for the fit and restores them after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpulab import precisions
from gpulab.precisions import PrecisionSpec


@dataclass
class TfPrecision:
    name: str
    init_scale: float = 2.0**16
    growth_interval: int = 2000

    @property
    def spec(self) -> PrecisionSpec:
        return precisions.get(self.name)

    @property
    def policy(self) -> str:
        return self.spec.keras_policy

    @property
    def scales_loss(self) -> bool:
        return self.spec.loss_scaling

    def wrap_optimizer(self, keras: Any, optimizer: Any) -> Any:
        """fp16-mixed: the LossScaleOptimizer around the recipe's optimizer; else the optimizer as is."""
        if not self.scales_loss:
            return optimizer
        return keras.mixed_precision.LossScaleOptimizer(
            optimizer, initial_scale=self.init_scale, dynamic_growth_steps=self.growth_interval
        )

    @contextlib.contextmanager
    def applied(self, tf: Any, keras: Any) -> Iterator[None]:
        before_policy = keras.mixed_precision.global_policy().name
        before_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        keras.mixed_precision.set_global_policy(self.policy)
        tf.config.experimental.enable_tensor_float_32_execution(self.spec.tf32)
        try:
            yield
        finally:
            keras.mixed_precision.set_global_policy(before_policy)
            tf.config.experimental.enable_tensor_float_32_execution(before_tf32)


def resolve_precision(
    name: str, device: precisions.DeviceFacts, init_scale: float, growth_interval: int
) -> TfPrecision:
    if name == precisions.AUTO:
        name, _ = precisions.auto(device)
    return TfPrecision(name, init_scale, growth_interval)
