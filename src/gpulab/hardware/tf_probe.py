"""What the doctor asks TensorFlow, asked in a child process that runs while the torch checks do.

Importing TensorFlow takes seconds (11 s of a 22 s doctor on this 2-core VM, busy), prints its C++ log
lines, and in the same process as torch on a GPU machine would take GPU memory. So the doctor starts
this file as a script (no gpulab import: nothing but TensorFlow loads) before it reads the rest of the
machine, and collects one JSON line at the end. Nothing starts when TensorFlow is not installed.

The child reports: version, ``tf.sysconfig.get_build_info()`` (CUDA build, CUDA and cuDNN versions), the
GPUs ``tf.config`` lists, and whether XLA works: a ``tf.function(jit_compile=True)`` compiled and run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass

PROBE_TIMEOUT_S = 120.0  # a TensorFlow that hangs (stuck CUDA init) is reported, not waited for forever


@dataclass
class TFProbe:
    """A running probe, or None where TensorFlow is not installed."""

    proc: subprocess.Popen


def start_probe() -> TFProbe | None:
    if importlib.util.find_spec("tensorflow") is None:
        return None
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}  # its C++ log lines are not the doctor's output
    # run_path, not `python FILE`: that would put gpulab/hardware/ (checks.py, load.py...) first on sys.path
    script = f"import runpy; runpy.run_path({os.path.abspath(__file__)!r}, run_name='__main__')"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return TFProbe(proc)


def collect(probe: TFProbe | None, timeout: float = PROBE_TIMEOUT_S) -> dict | None:
    """The child's answer; ``{"error": ...}`` when it failed or hung; None when TF is not installed."""
    if probe is None:
        return None
    try:
        out, err = probe.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        probe.proc.kill()
        probe.proc.communicate()
        return {"error": f"importing TensorFlow did not finish within {timeout:.0f} s"}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if probe.proc.returncode != 0 or not lines:
        last = [line for line in err.splitlines() if line.strip()]
        return {"error": last[-1].strip() if last else f"exit code {probe.proc.returncode}"}
    return json.loads(lines[-1])


def _probe() -> dict:
    """Runs in the child: import TensorFlow, read its build, list its GPUs, compile one XLA function."""
    # `import tensorflow` eagerly loads Keras (and through it scikit-learn where installed): half of its
    # import time here (14 s -> 7 s), for nothing the probe asks. A None in sys.modules makes that
    # import fail, which TensorFlow's __init__ catches; this child process does nothing else.
    for name in ("keras", "tf_keras"):
        sys.modules.setdefault(name, None)
    try:
        import tensorflow as tf
    except Exception as exc:  # a broken install is the answer, not a crash
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()}
    build = dict(tf.sysconfig.get_build_info())
    answer = {
        "version": tf.__version__,
        "cuda_build": bool(build.get("is_cuda_build")),
        "cuda": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "xla_error": None,
    }
    try:
        value = tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)(tf.ones([4]))
        if float(value) != 8.0:
            answer["xla_error"] = f"an XLA-compiled sum returned {float(value)}, not 8.0"
    except Exception as exc:
        answer["xla_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return answer


if __name__ == "__main__":
    print(json.dumps(_probe()), flush=True)
