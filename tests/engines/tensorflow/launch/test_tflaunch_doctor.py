"""The doctor's TensorFlow checks driven by fakes: absent, broken, hung and GPU-mismatched TensorFlow.

The real probe on this machine runs in tests/hardware/test_doctor.py (the doctor's own real run).
"""

from __future__ import annotations

import subprocess
import sys

from gpulab.cli.doctor import run_doctor  # the machine's checks and the engines'
from gpulab.hardware import facts as F
from gpulab.hardware import tf_probe


def _child(code: str) -> tf_probe.TFProbe:
    """A stand-in for the probe's child process, running ``code``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return tf_probe.TFProbe(proc)


def _checks(report) -> dict:
    return {c["name"]: c for c in report.to_json()["checks"]}


def test_tensorflow_absent_is_one_info_line_not_a_failure(monkeypatch):
    monkeypatch.setattr(tf_probe.importlib.util, "find_spec", lambda name: None)
    assert tf_probe.start_probe() is None  # nothing is started
    monkeypatch.setattr(F.tf_probe, "start_probe", lambda: None)
    report = run_doctor(F.gather_facts(run_compute=False))
    checks = _checks(report)
    assert checks["tensorflow"]["status"] == "info"
    assert "pip install 'gpulab[tensorflow]'" in checks["tensorflow"]["fix"]
    assert not {"tensorflow-gpus", "tensorflow-xla"} & set(checks)  # shown only with TensorFlow
    assert report.to_json()["frameworks"]["tensorflow"] is None


def test_gpu_mismatch_is_a_warning_with_the_fix():
    f = F.Facts(torch_version="2.13.0+cu128", torch_build="cuda", torch_cuda="12.8", torch_cuda_count=2)
    answer = {
        "version": "2.21.0",
        "cuda_build": False,
        "cuda": None,
        "cudnn": None,
        "gpus": 0,
        "xla_error": None,
    }
    F._apply_tensorflow(f, answer)
    report = run_doctor(f)
    checks = _checks(report)
    assert checks["tensorflow"] == {
        "name": "tensorflow",
        "status": "ok",
        "detail": "TensorFlow 2.21.0, CPU-only build",
        "fix": "",
    }
    gpus = checks["tensorflow-gpus"]
    assert gpus["status"] == "warn"
    assert gpus["detail"] == "TensorFlow 2.21.0 sees 0 GPU(s), torch sees 2: a CPU-only build of TensorFlow"
    assert gpus["fix"] == "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]==2.21.0'"
    assert checks["tensorflow-xla"]["status"] == "ok"
    assert report.to_json()["frameworks"]["tensorflow"] == {
        "version": "2.21.0", "error": None, "cuda_build": False, "cuda": None, "cudnn": None, "gpus": 0, "xla": True
    }  # fmt: skip


def test_a_tensorflow_that_fails_to_import_is_a_warning_naming_why():
    child = _child(
        "import sys; sys.stderr.write('noise\\nImportError: libcudnn.so.9: cannot open\\n'); sys.exit(1)"
    )
    f = F.Facts()
    F._apply_tensorflow(f, tf_probe.collect(child))
    checks = _checks(run_doctor(f))
    assert checks["tensorflow"]["status"] == "warn"
    assert checks["tensorflow"]["detail"].endswith("does not import: ImportError: libcudnn.so.9: cannot open")
    assert not {"tensorflow-gpus", "tensorflow-xla"} & set(checks)


def test_a_hung_tensorflow_is_reported_after_the_timeout():
    child = _child("import time; time.sleep(60)")
    assert tf_probe.collect(child, timeout=0.5) == {"error": "importing TensorFlow did not finish within 0 s"}
    assert child.proc.returncode is not None  # killed and reaped, not left behind
