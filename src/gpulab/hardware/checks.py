"""The doctor's checks: each a pure function of ``Facts`` returning one ``Check`` with a pasteable fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpulab.hardware import nvml
from gpulab.hardware.facts import Facts

Status = Literal["ok", "info", "warn", "fail"]  # info: nothing wrong, something to know
SHM_MIN_BYTES = 1 << 30  # DataLoader workers pass whole batches through /dev/shm; 64 MB dies on images.
# torch's CUDA wheel variants, oldest first: the fix suggests the newest one the driver can run.
CUDA_WHEELS = [((11, 8), "cu118"), ((12, 1), "cu121"), ((12, 4), "cu124"), ((12, 6), "cu126"),
               ((12, 8), "cu128"), ((12, 9), "cu129"), ((13, 0), "cu130")]  # fmt: skip


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def _wheel_for(driver_cuda: tuple[int, int] | None) -> str:
    fitting = [tag for ver, tag in CUDA_WHEELS if driver_cuda is None or ver <= driver_cuda]
    return fitting[-1] if fitting else CUDA_WHEELS[0][1]


def install_fix(driver_cuda: tuple[int, int] | None) -> str:
    tag = _wheel_for(driver_cuda)
    return f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag}"


def check_torch(f: Facts) -> Check:
    if f.torch_version is None:
        if f.tensorflow_version is not None:  # a TensorFlow user's install: torch is an extra
            return Check(
                "torch",
                "info",
                "PyTorch is not installed: the torch engine needs it; --engine tensorflow runs without",
                "pip install 'gpulab[torch]' for the torch engine",
            )
        return Check(
            "torch",
            "fail",
            "neither PyTorch nor TensorFlow is installed: no engine can train",
            "pip install 'gpulab[torch]' (or 'gpulab[tensorflow]' for --engine tensorflow)",
        )
    gpus = len(f.nvml_gpu_names)
    if f.torch_build == "cpu" and gpus:
        return Check(
            "torch",
            "fail",
            f"torch {f.torch_version} is a CPU-only build but NVML sees {gpus} NVIDIA GPU(s)",
            install_fix(f.driver_cuda),
        )
    if (
        f.torch_build in ("cuda", "rocm")
        and gpus
        and not f.torch_cuda_count
        and f.cuda_visible_devices is None
    ):
        return Check(
            "torch",
            "fail",
            f"torch {f.torch_version} was built for CUDA but sees no GPU although NVML sees {gpus}",
            "check the driver with `nvidia-smi`, then " + install_fix(f.driver_cuda),
        )
    where = f"{f.torch_cuda_count} GPU(s) visible" if f.torch_cuda_count else "no GPU"
    return Check("torch", "ok", f"torch {f.torch_version} ({f.torch_build} build), {where}")


def check_cuda_driver(f: Facts) -> Check:
    name = "cuda-driver"
    if f.torch_build != "cuda" or not f.torch_cuda:
        return Check(name, "ok", "not applicable (no CUDA build of torch)")
    if not f.nvml_available or f.driver_cuda is None:
        if f.torch_cuda_count:
            return Check(
                name, "warn", f"driver version unreadable ({f.nvml_reason})", "pip install nvidia-ml-py"
            )
        return Check(name, "ok", f"no NVIDIA driver ({f.nvml_reason}); CUDA unused")
    major, minor = (int(x) for x in f.torch_cuda.split(".")[:2])
    drv = f.driver_cuda
    detail = f"torch CUDA runtime {major}.{minor}, driver {f.driver_version} supports CUDA {drv[0]}.{drv[1]}"
    fix = f"upgrade the NVIDIA driver to one for CUDA {major}.{minor}+, or {install_fix(drv)}"
    if (major, minor) <= drv:
        return Check(name, "ok", detail)
    if major > drv[0]:
        return Check(name, "fail", detail + ": the driver is too old for this torch", fix)
    # Same major: minor-version compatibility runs most kernels, but PTX JIT and new features fail.
    return Check(name, "warn", detail + ": relying on CUDA minor-version compatibility", fix)


def check_visible_devices(f: Facts) -> Check:
    name, raw = "CUDA_VISIBLE_DEVICES", f.cuda_visible_devices
    if raw is None:
        return Check(name, "ok", "unset: every GPU is visible")
    physical = len(f.nvml_gpu_names)
    valid = f"valid indices here: 0..{physical - 1}" if physical else "this machine has no NVIDIA GPU"
    fix_all = "unset CUDA_VISIBLE_DEVICES"
    if raw.strip() == "":
        return Check(name, "warn", "set to an empty string: every GPU is hidden", fix_all)
    tokens = [str(int(t)) if t.isdigit() else t for t in (t.strip() for t in raw.split(","))]
    if len(set(tokens)) < len(tokens):
        return Check(
            name, "fail", f"{raw!r} lists a GPU twice, so CUDA hides every GPU", _visible_fix(physical)
        )
    parsed = nvml.parse_visible_devices(raw)
    if len(parsed) < len(tokens):
        bad = tokens[len(parsed)]
        return Check(
            name,
            "fail",
            f"{raw!r}: entry {bad!r} is not a GPU index or UUID, so CUDA ignores it "
            f"and everything after it; {valid}",
            _visible_fix(physical),
        )
    indices = [int(t) for t in parsed if t.isdigit()]
    missing = [i for i in indices if physical and i >= physical]
    if missing or (indices and not physical and f.nvml_available):
        return Check(
            name,
            "fail",
            f"{raw!r} names GPU(s) {missing or indices} that do not exist; {valid}",
            _visible_fix(physical),
        )
    return Check(name, "ok", f"{raw!r}: {len(parsed)} GPU(s) selected")


def _visible_fix(physical: int) -> str:
    return (
        f"export CUDA_VISIBLE_DEVICES={','.join(map(str, range(physical)))}"
        if physical
        else ("unset CUDA_VISIBLE_DEVICES")
    )


def check_nccl(f: Facts) -> Check:
    if f.torch_cuda_count < 2:
        return Check("nccl", "ok", f"not needed ({f.torch_cuda_count} GPU visible); gloo serves CPU runs")
    if f.nccl_version:
        return Check("nccl", "ok", f"NCCL {f.nccl_version} for {f.torch_cuda_count} GPUs")
    return Check(
        "nccl",
        "fail",
        f"{f.torch_cuda_count} GPUs but torch has no NCCL: multi-GPU training cannot use the fast backend",
        install_fix(f.driver_cuda),
    )


def check_shm(f: Facts) -> Check:
    fix = "docker run --shm-size=8g ... (or --ipc=host); on Kubernetes mount an emptyDir with medium: Memory"
    if f.shm_bytes is None:
        return Check("shm", "fail", f"{f.shm_path} is missing: DataLoader workers cannot share batches", fix)
    size = f"{f.shm_path} is {f.shm_bytes / 2**20:.0f} MiB"
    if f.shm_bytes < SHM_MIN_BYTES:
        return Check("shm", "warn", size + ": DataLoader workers may die with 'bus error'", fix)
    return Check("shm", "ok", size)


def check_threads(f: Facts) -> Check:
    raw, cores = f.omp_num_threads, f.logical_cores
    if raw is not None and (not raw.isdigit() or int(raw) < 1):
        return Check(
            "threads",
            "fail",
            f"OMP_NUM_THREADS={raw!r} is not a positive integer",
            f"export OMP_NUM_THREADS={cores}",
        )
    threads = int(raw) if raw else f.torch_threads
    detail = f"{threads} compute threads on {cores} cores" + ("" if raw else " (OMP_NUM_THREADS unset)")
    if f.load_1min is not None:
        detail += f"; load average {f.load_1min:g}"
    if threads and threads > cores:
        return Check(
            "threads",
            "warn",
            detail + ": oversubscribed, threads will fight for cores",
            f"export OMP_NUM_THREADS={cores}",
        )
    if f.load_1min is not None and f.load_1min > cores:
        # torch's threads wait for each other at every parallel region: one thread each is faster then.
        return Check(
            "threads",
            "warn",
            detail + ": the machine is busy, other processes compete for the cores",
            "export OMP_NUM_THREADS=1 while it stays busy (a CPU run can be several times faster)",
        )
    return Check("threads", "ok", detail)


def check_compute(f: Facts) -> Check:
    if not f.compute_errors:
        if f.torch_version is None:  # the probe runs on torch; TensorFlow's own is tensorflow-xla's
            status = "fail" if f.tensorflow_version is None else "info"
            return Check("compute", status, "not run (torch missing)", "pip install 'gpulab[torch]'")
        return Check("compute", "ok", "not run")
    bad = {spec: err for spec, err in f.compute_errors.items() if err}
    if bad:
        spec, err = next(iter(bad.items()))
        return Check(
            "compute",
            "fail",
            f"{spec}: {err}",
            "run `nvidia-smi -q -d ECC,PAGE_RETIREMENT`; reset or replace the GPU",
        )
    return Check(
        "compute", "ok", "matmul and elementwise agree with the CPU on " + ", ".join(f.compute_errors)
    )


# A check returning None does not apply to this machine and is not shown. Each engine adds its own (a
# ``doctor`` capability: TensorFlow's in engines/tensorflow/doctor.py); these are the machine's and torch's.
CHECKS: list[Callable[[Facts], Check | None]] = [
    check_torch,
    check_cuda_driver,
    check_visible_devices,
    check_nccl,
    check_shm,
    check_threads,
    check_compute,
]
