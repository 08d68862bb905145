"""matmul: an n x n @ n x n product on the CPU and on the GPU, in fp32, tf32, bf16 and fp16.

TFLOP/s = 2n³ / time. On a GPU each point also gets the speedup over the CPU at the same size and dtype
and the fraction of the part's datasheet peak. Sizes a device would take too long on (fp16 on most
CPUs has no fast kernel) are skipped by a time budget per point, predicted from the size below. The
sweep, notes and plot are ``measure/matmul_sweep.py`` (the TensorFlow side's too); this is torch's product.
"""

from __future__ import annotations

import torch

from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.runtime.precision import TF32
from gpulab.measure import bench_profiles, matmul_sweep
from gpulab.measure.harness import BenchContext
from gpulab.measure.results import SuiteResult

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PROFILES, MIN_SAMPLE_S = bench_profiles.MATMUL, bench_profiles.MATMUL_MIN_SAMPLE_S


def run(ctx: BenchContext) -> SuiteResult:
    engine = matmul_sweep.MatmulEngine(
        cpu=torch.device("cpu"),
        timer=_time_product,
        oom=(torch.cuda.OutOfMemoryError,),
        device_name=_device_name,
        threads_note=lambda: f"CPU products use {torch.get_num_threads()} threads.",
        release=_release,
    )
    return matmul_sweep.run(ctx, engine)


def _time_product(ctx: BenchContext, device: torch.device, dtype: str, n: int):
    g = torch.Generator(device=device).manual_seed(0)  # never the caller's random stream
    a, b = (torch.randn(n, n, device=device, dtype=DTYPES[dtype], generator=g) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=DTYPES[dtype])
    policy = TF32(device.type) if dtype == "tf32" else None
    if policy:
        policy.setup()
    try:
        with torch.inference_mode():
            product = lambda: torch.matmul(a, b, out=c)  # noqa: E731
            return ctx.measure(product, device=accelerator(device), min_sample_s=MIN_SAMPLE_S)
    finally:
        if policy:
            policy.teardown()


def _device_name(device: torch.device) -> str:
    return accelerator(device).name()


def _release(device: torch.device) -> None:
    accelerator(device).release_cached_memory()
