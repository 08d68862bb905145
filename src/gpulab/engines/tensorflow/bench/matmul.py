"""matmul on TensorFlow: ``tf.linalg.matmul`` through the torch suite's sweep (sizes, dtypes, budget, notes
and plot: ``measure/matmul_sweep.py``)."""

from __future__ import annotations

from typing import Any

from gpulab.engines.tensorflow.bench.context import TfBenchContext, tensorflow_side
from gpulab.measure import bench_profiles, matmul_sweep
from gpulab.measure.knobs import DeviceName
from gpulab.measure.results import SuiteResult

DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def run(ctx: TfBenchContext) -> SuiteResult:
    import tensorflow as tf

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        engine = matmul_sweep.MatmulEngine(
            cpu=DeviceName("cpu"),
            timer=_timer(tf),
            oom=(tf.errors.ResourceExhaustedError,),
            device_name=lambda device: _gpu_name(tf, ctx.tf_device),
            threads_note=lambda: _threads_note(tf),
        )
        result = matmul_sweep.run(ctx, engine)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)
    return tensorflow_side(result, "matmul")


def _threads_note(tf: Any) -> str:
    threads = tf.config.threading.get_intra_op_parallelism_threads() or "TensorFlow's default number of"
    return f"CPU products use {threads} threads (TensorFlow's intra-op pool)."


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

            return ctx.measure(product, min_sample_s=bench_profiles.MATMUL_MIN_SAMPLE_S)

    return time_product


def _gpu_name(tf: Any, tf_device: str) -> str:
    """The GPU's name from its driver (as torch.cuda.get_device_name gives it), for the datasheet peak."""
    gpu = tf.config.list_physical_devices("GPU")[int(tf_device.rpartition(":")[2])]
    return tf.config.experimental.get_device_details(gpu).get("device_name", "unknown GPU")
