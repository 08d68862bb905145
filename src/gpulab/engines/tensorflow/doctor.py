"""The doctor's TensorFlow checks (``TensorFlowEngine.doctor``): each a pure function of the machine's
``Facts`` (the TensorFlow probe's answers in them: hardware/tf_probe.py), one ``Check`` with a pasteable fix,
or None where it does not apply."""

from __future__ import annotations

from collections.abc import Callable

from gpulab.hardware.checks import Check, install_fix
from gpulab.hardware.facts import Facts

TF_INSTALL = "pip install 'gpulab[tensorflow]' (with NVIDIA GPUs: pip install 'tensorflow[and-cuda]')"


def _tf_build(f: Facts) -> str:
    if not f.tensorflow_cuda_build:
        return "CPU-only build"
    return f"CUDA {f.tensorflow_cuda or '?'} / cuDNN {f.tensorflow_cudnn or '?'} build"


def check_tensorflow(f: Facts) -> Check:
    """Installed? Which version and build (tf.sysconfig.get_build_info). Absent is only information."""
    if f.tensorflow_error is not None:
        return Check(
            "tensorflow",
            "warn",
            f"TensorFlow is installed but does not import: {f.tensorflow_error}",
            "pip install --force-reinstall 'gpulab[tensorflow]' (or tensorflow[and-cuda] with GPUs)",
        )
    if f.tensorflow_version is None:
        return Check("tensorflow", "info", "not installed (needed only for --engine tensorflow)", TF_INSTALL)
    return Check("tensorflow", "ok", f"TensorFlow {f.tensorflow_version}, {_tf_build(f)}")


def check_tensorflow_gpus(f: Facts) -> Check | None:
    """The GPUs TensorFlow sees against the GPUs torch sees; not shown without a working TensorFlow."""
    name = "tensorflow-gpus"
    if f.tensorflow_version is None or f.tensorflow_gpu_count is None:
        return None
    tf_n, torch_n = f.tensorflow_gpu_count, f.torch_cuda_count
    if tf_n == torch_n:
        seen = (
            f"TensorFlow and torch both see {tf_n} GPU(s)"
            if tf_n
            else "neither TensorFlow nor torch sees a GPU"
        )
        return Check(name, "ok", seen)
    detail = f"TensorFlow {f.tensorflow_version} sees {tf_n} GPU(s), torch sees {torch_n}"
    if tf_n > torch_n:  # torch is the one missing them: its own check says more
        return Check(name, "warn", detail, install_fix(f.driver_cuda))
    if not f.tensorflow_cuda_build:
        fix = f"pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]=={f.tensorflow_version}'"
        return Check(name, "warn", f"{detail}: a CPU-only build of TensorFlow", fix)
    built = f.tensorflow_cuda or "?"
    try:
        wanted = tuple(int(x) for x in built.split(".")[:2])
    except ValueError:
        wanted = None
    if wanted and f.driver_cuda and wanted > f.driver_cuda:
        drv = f"{f.driver_cuda[0]}.{f.driver_cuda[1]}"
        fix = f"upgrade the NVIDIA driver to one for CUDA {built}+ (this one supports CUDA {drv})"
    else:  # the wheel's CUDA libraries are missing or do not match: the and-cuda extra pins them
        fix = (
            f"pip install 'tensorflow[and-cuda]=={f.tensorflow_version}' (brings the CUDA {built} libraries)"
        )
    return Check(name, "warn", f"{detail} (built for CUDA {built})", fix)


def check_tensorflow_xla(f: Facts) -> Check | None:
    """XLA (what compile: true uses on TensorFlow) compiled and ran a function; not shown without TF."""
    if f.tensorflow_version is None:
        return None
    if f.tensorflow_xla_error is None:
        return Check("tensorflow-xla", "ok", "XLA available: tf.function(jit_compile=True) compiled and ran")
    return Check(
        "tensorflow-xla",
        "warn",
        f"XLA does not work: {f.tensorflow_xla_error}",
        "train with compile: false on --engine tensorflow, or "
        "pip install --force-reinstall 'gpulab[tensorflow]'",
    )


CHECKS: list[Callable[[Facts], Check | None]] = [
    check_tensorflow,
    check_tensorflow_gpus,
    check_tensorflow_xla,
]
