"""Each doctor check driven to ok, warn and fail by crafted facts."""

from __future__ import annotations

import pytest

from gpulab.engines.tensorflow import doctor as tf_doctor  # the TensorFlow engine's checks
from gpulab.hardware import checks
from gpulab.hardware.facts import Facts

H100 = ["NVIDIA H100 80GB HBM3"]


def cuda_box(**kw) -> Facts:
    base = dict(
        torch_version="2.13.0+cu128", torch_build="cuda", torch_cuda="12.8", torch_cuda_count=1,
        nvml_available=True, nvml_gpu_names=H100, driver_version="570.1", driver_cuda=(12, 8),
        nccl_version="2.27.3", shm_bytes=8 << 30, logical_cores=16, torch_threads=16,
        compute_errors={"cpu": None, "cuda:0": None},
    )  # fmt: skip
    base.update(kw)
    return Facts(**base)


CASES = [
    # check, facts, expected status, a phrase the detail or fix must contain
    (checks.check_torch, Facts(), "fail", "pip install 'gpulab[torch]'"),
    # a TensorFlow user's install (gpulab[tensorflow], no torch): said, not failed
    (checks.check_torch, Facts(tensorflow_version="2.21.0"), "info", "--engine tensorflow runs without"),
    (checks.check_compute, Facts(tensorflow_version="2.21.0"), "info", "gpulab[torch]"),
    (checks.check_compute, Facts(), "fail", "torch missing"),
    (checks.check_torch, cuda_box(torch_build="cpu", torch_cuda=None, torch_cuda_count=0), "fail",
     "download.pytorch.org/whl/cu128"),
    (checks.check_torch, cuda_box(torch_cuda_count=0), "fail", "nvidia-smi"),
    (checks.check_torch, cuda_box(), "ok", "1 GPU(s) visible"),
    (checks.check_cuda_driver, cuda_box(), "ok", "supports CUDA 12.8"),
    (checks.check_cuda_driver, cuda_box(driver_cuda=(12, 4)), "warn", "minor-version"),
    (checks.check_cuda_driver, cuda_box(driver_cuda=(11, 8)), "fail", "whl/cu118"),
    (checks.check_visible_devices, cuda_box(), "ok", "unset"),
    (checks.check_visible_devices, cuda_box(cuda_visible_devices="0"), "ok", "1 GPU(s) selected"),
    (checks.check_visible_devices, cuda_box(cuda_visible_devices=""), "warn", "unset CUDA_VISIBLE_DEVICES"),
    (checks.check_visible_devices, cuda_box(cuda_visible_devices="0,gpu1"), "fail", "'gpu1'"),
    (checks.check_visible_devices, cuda_box(cuda_visible_devices="3"), "fail", "VISIBLE_DEVICES=0"),
    (checks.check_visible_devices, cuda_box(cuda_visible_devices="0,0"), "fail", "twice"),
    (checks.check_nccl, cuda_box(), "ok", "not needed"),
    (checks.check_nccl, cuda_box(torch_cuda_count=2), "ok", "NCCL 2.27.3"),
    (checks.check_nccl, cuda_box(torch_cuda_count=2, nccl_version=None), "fail", "no NCCL"),
    (checks.check_shm, cuda_box(), "ok", "8192 MiB"),
    (checks.check_shm, cuda_box(shm_bytes=64 << 20), "warn", "--shm-size"),
    (checks.check_shm, cuda_box(shm_bytes=None), "fail", "missing"),
    (checks.check_threads, cuda_box(), "ok", "16 compute threads"),
    (checks.check_threads, cuda_box(omp_num_threads="64"), "warn", "export OMP_NUM_THREADS=16"),
    (checks.check_threads, cuda_box(omp_num_threads="lots"), "fail", "not a positive integer"),
    (checks.check_threads, cuda_box(load_1min=3.5), "ok", "load average 3.5"),
    (checks.check_threads, cuda_box(load_1min=40.0), "warn", "OMP_NUM_THREADS=1"),
    (tf_doctor.check_tensorflow, cuda_box(), "info", "pip install 'gpulab[tensorflow]'"),
    (tf_doctor.check_tensorflow, cuda_box(tensorflow_version="2.20", tensorflow_cuda_build=True,
     tensorflow_cuda="12.5.1", tensorflow_cudnn="9"), "ok", "TensorFlow 2.20, CUDA 12.5.1 / cuDNN 9 build"),
    (tf_doctor.check_tensorflow, cuda_box(tensorflow_error="ImportError: libcudart.so.12"), "warn", "libcudart"),
    (tf_doctor.check_tensorflow_gpus, cuda_box(tensorflow_version="2.20", tensorflow_gpu_count=1), "ok", "both see 1"),
    (tf_doctor.check_tensorflow_gpus, cuda_box(tensorflow_version="2.20", tensorflow_gpu_count=0), "warn",
     "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.20'"),
    (tf_doctor.check_tensorflow_gpus, cuda_box(tensorflow_version="2.20", tensorflow_gpu_count=0,
     tensorflow_cuda_build=True, tensorflow_cuda="12.5.1"), "warn", "'tensorflow[and-cuda]==2.20' (brings the CUDA 12.5.1"),
    (tf_doctor.check_tensorflow_gpus, cuda_box(tensorflow_version="2.20", tensorflow_gpu_count=0, driver_cuda=(12, 2),
     tensorflow_cuda_build=True, tensorflow_cuda="12.5.1"), "warn", "driver to one for CUDA 12.5.1+"),
    (tf_doctor.check_tensorflow_gpus, cuda_box(tensorflow_version="2.20", tensorflow_gpu_count=2), "warn",
     "torch sees 1"),
    (tf_doctor.check_tensorflow_xla, cuda_box(tensorflow_version="2.20"), "ok", "jit_compile=True"),
    (tf_doctor.check_tensorflow_xla, cuda_box(tensorflow_version="2.20", tensorflow_xla_error="NotFoundError: x"),
     "warn", "compile: false"),
    (checks.check_compute, cuda_box(), "ok", "cpu, cuda:0"),
    (checks.check_compute, cuda_box(compute_errors={"cpu": None, "cuda:0": "results differ"}), "fail",
     "cuda:0: results differ"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("check", "facts", "status", "phrase"), CASES, ids=lambda v: getattr(v, "__name__", None)
)
def test_check(check, facts, status, phrase):
    result = check(facts)
    assert result.status == status, result
    assert phrase in result.detail + " " + result.fix
    if status != "ok":
        assert result.fix, "every warning or failure carries a fix a user can paste"


def test_tensorflow_checks_are_not_shown_without_tensorflow():
    for check in (tf_doctor.check_tensorflow_gpus, tf_doctor.check_tensorflow_xla):
        assert check(cuda_box()) is None
        assert check(cuda_box(tensorflow_error="ImportError: x")) is None


def test_every_check_reaches_ok_and_a_problem():
    seen = {(c.__name__, s) for c, _, s, _ in CASES}
    for check in [*checks.CHECKS, *tf_doctor.CHECKS]:
        assert (check.__name__, "ok") in seen
        assert {(check.__name__, "warn"), (check.__name__, "fail")} & seen
