"""matmul on TensorFlow: ``tf.linalg.matmul`` over the torch suite's sizes, dtypes, budget and plot."""

from __future__ import annotations

from typing import Any

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.engines.torch.bench import matmul
from gpulab.measure.results import SuiteResult

DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def run(ctx: TfBenchContext) -> SuiteResult:
    import tensorflow as tf

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        result = matmul.run(ctx, timer=_timer(tf), oom=(tf.errors.ResourceExhaustedError,))
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)
    threads = tf.config.threading.get_intra_op_parallelism_threads() or "TensorFlow's default number of"
    result.notes = [n for n in result.notes if not n.startswith("CPU products use")]
    result.notes.append(f"CPU products use {threads} threads (TensorFlow's intra-op pool).")
    return tensorflow_side(result, "matmul")


def _timer(tf: Any):
    def time_product(ctx: TfBenchContext, device: Any, dtype: str, n: int):
        tf_device = "/CPU:0" if device.type == "cpu" else ctx.tf_device
        tf.config.experimental.enable_tensor_float_32_execution(dtype == "tf32")
        with tf.device(tf_device):
            g = tf.random.Generator.from_seed(0)  # never the global random stream
            a, b = (tf.cast(g.normal((n, n)), DTYPES[dtype]) for _ in range(2))

            def product() -> None:
                c = tf.linalg.matmul(a, b)
                if tf_device != "/CPU:0":
                    c[0, 0].numpy()  # waits for the product (GPU kernels are asynchronous)

            return ctx.measure(product, min_sample_s=matmul.MIN_SAMPLE_S)

    return time_product
