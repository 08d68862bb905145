"""What the doctor reads off the machine, gathered once so the checks can be pure functions."""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass, field

import psutil

from gpulab.hardware import devices as dev
from gpulab.hardware import nvml, tf_probe
from gpulab.hardware.load import load_average


@dataclass
class Facts:
    """Everything the checks look at. Defaults describe a healthy CPU-only machine."""

    python_version: str = platform.python_version()
    torch_version: str | None = None
    torch_build: str = "none"  # cpu | cuda | rocm | none
    torch_cuda: str | None = None  # CUDA runtime torch was built with, e.g. "12.8"
    torch_hip: str | None = None
    torch_cuda_count: int = 0
    torch_threads: int | None = None
    nvml_available: bool = False
    nvml_reason: str = ""
    nvml_gpu_names: list[str] = field(default_factory=list)
    driver_version: str | None = None
    driver_cuda: tuple[int, int] | None = None  # newest CUDA the driver supports
    cuda_visible_devices: str | None = None
    nccl_version: str | None = None
    shm_path: str = "/dev/shm"
    shm_bytes: int | None = None
    omp_num_threads: str | None = None
    logical_cores: int = 1
    load_1min: float | None = None  # load average: other processes competing for the cores
    tensorflow_version: str | None = None  # None: not installed (or it does not import: tensorflow_error)
    tensorflow_error: str | None = None  # why TensorFlow does not import, when it does not
    tensorflow_cuda_build: bool = False
    tensorflow_cuda: str | None = None  # the CUDA / cuDNN TensorFlow was built for (tf.sysconfig)
    tensorflow_cudnn: str | None = None
    tensorflow_gpu_count: int | None = None
    tensorflow_xla_error: str | None = None  # None: an XLA-compiled function ran
    devices: list[dev.DeviceInfo] = field(default_factory=list)
    compute_errors: dict[str, str | None] = field(default_factory=dict)  # device spec -> None when ok


def _shm_size(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


def _apply_tensorflow(f: Facts, answer: dict | None) -> None:
    """The TensorFlow probe's answer (tf_probe.py) into the facts; None: not installed."""
    if answer is None:
        return
    if "error" in answer:
        f.tensorflow_error = answer["error"]
        return
    f.tensorflow_version = answer["version"]
    f.tensorflow_cuda_build = answer["cuda_build"]
    f.tensorflow_cuda, f.tensorflow_cudnn = answer["cuda"], answer["cudnn"]
    f.tensorflow_gpu_count = answer["gpus"]
    f.tensorflow_xla_error = answer["xla_error"]


def probe_compute(spec: str) -> str | None:
    """Run an elementwise op and a matrix product on ``spec`` and compare with float64 on the CPU.

    Returns None when they agree, else what went wrong. TF32 is switched off for the duration so a
    healthy Ampere+ GPU is compared at full fp32 precision.
    """
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g)
    want_mm, want_ew = (a.double() @ b.double()), (a.double() * 2 + 1).sum()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        da, db = a.to(spec), b.to(spec)
        got_mm, got_ew = (da @ db).cpu().double(), (da * 2 + 1).sum().cpu().double()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    err = (got_mm - want_mm).abs().max().item()
    if err > 1e-3 or abs(got_ew.item() - want_ew.item()) > 1e-2:
        return f"results differ from the CPU reference (max abs error {err:.2e})"
    return None


def gather_facts(
    shm_path: str = "/dev/shm", run_compute: bool = True, probe_tensorflow: bool = True
) -> Facts:
    """Read the machine. Never raises: whatever cannot be read stays at its 'absent' value."""
    # TensorFlow loads in a child process meanwhile (seconds); not probed: reads as not installed
    tf = tf_probe.start_probe() if probe_tensorflow else None
    ok, reason = nvml.nvml_status()
    f = Facts(
        nvml_available=ok,
        nvml_reason=reason,
        nvml_gpu_names=nvml.gpu_names(),
        driver_version=nvml.driver_version(),
        driver_cuda=nvml.cuda_driver_version(),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        shm_path=shm_path,
        shm_bytes=_shm_size(shm_path),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        logical_cores=psutil.cpu_count(logical=True) or 1,
        load_1min=load_average(),
        devices=dev.discover(),
    )
    f.torch_build = dev.torch_build()
    if f.torch_build != "none":
        import torch

        f.torch_version = torch.__version__
        f.torch_cuda, f.torch_hip = torch.version.cuda, getattr(torch.version, "hip", None)
        f.torch_cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        f.torch_threads = torch.get_num_threads()
        f.nccl_version = dev.nccl_version()
        if run_compute:
            f.compute_errors = {d.spec: probe_compute(d.spec) for d in f.devices}
    _apply_tensorflow(f, tf_probe.collect(tf))
    return f
