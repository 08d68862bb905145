"""A TensorFlow user's install: `pip install 'gpulab[tensorflow]'`, no torch (`make test-tf-only` builds that
venv). The TensorFlow engine trains the digits CNN, exports it (SavedModel, TFLite: parity checked), profiles,
inspects, tunes, and the doctor passes; a torch verb says which extra to install. In a venv with torch these
are deselected (`make test`) or skipped: tests/engines/test_registry.py checks the same through sys.modules.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.tf_only,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is not None,
        reason="needs a venv without torch (make test-tf-only)",
    ),
]


def gpulab(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *argv], capture_output=True, text=True, timeout=280, cwd=cwd
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One short digits run on the TensorFlow engine, shared by the verbs that read it."""
    here = tmp_path_factory.mktemp("tf")
    proc = gpulab("train", "digits", "--engine", "tensorflow", "--max-steps", "30", "--out", "run",
                  "--set", "progress=false", cwd=here)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return here / "run"


def test_torch_is_not_installed():
    with pytest.raises(ImportError):
        import torch  # noqa: F401


def test_train_digits(run):
    summary = json.loads((run / "summary.json").read_text())
    assert summary["engine"] == "tensorflow" and summary["steps"] == 30
    assert summary["accuracy"] > 0.3  # 30 steps from chance (10%): it learns
    assert (run / "model.weights.h5").is_file()


def test_checkpoints_and_resume(tmp_path):
    """TensorFlow's own checkpoint format under gpulab's MANIFEST: written and resumed without torch."""
    args = ["train", "mlp", "--engine", "tensorflow", "--set", "options.samples=200", "--set",
            "checkpoint_every=2", "--set", "progress=false", "--out", "run"]  # fmt: skip
    first = gpulab(*args, "--max-steps", "4", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = gpulab(*args, "--max-steps", "6", "--resume", "latest", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["resumed_from"].endswith("step-00000004")


def test_checkpoint_inspect(run):
    """The storage and meta.json are read without any framework; TensorFlow's files are verified by the
    MANIFEST's checksums (torch's checkpoint code is never imported)."""
    proc = gpulab("checkpoint", "inspect", str(run), "--json", cwd=run.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["valid"] and report["layout"] == "tensorflow" and report["step"] == 30
    assert report["recipe"] == "digits" and {f["status"] for f in report["files"]} == {"ok"}


def test_checkpoint_export_says_where_the_weights_are(run):
    """``checkpoint export`` asks the engine of the MANIFEST's layout: TensorFlow's names its weights file
    in one line, without torch."""
    proc = gpulab("checkpoint", "export", str(run), "--to", "w.safetensors", cwd=run.parent)
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = proc.stderr.strip().splitlines()
    assert "was written by the TensorFlow engine: its weights are the run's model.weights.h5" in line


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite"])
def test_export_checks_parity_without_torch(run, fmt):
    proc = gpulab("export", str(run), "--format", fmt, cwd=run.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parity = json.loads((run / "export" / f"digits.{fmt}.parity.json").read_text())
    assert parity["passed"] and parity["samples"] == 360
    assert parity["top1_agreement"] == 1.0


def test_profile(tmp_path):
    proc = gpulab("profile", "digits", "--engine", "tensorflow", "--steps", "4", "--warmup", "1", "--active",
                  "1", "--out", "prof", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "prof" / "profile.json").read_text())
    assert report["engine"] == "tensorflow" and report["step_s_median"] > 0


def test_inspect(tmp_path):
    proc = gpulab("inspect", "digits", "--engine", "tensorflow", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["engine"] == "tensorflow"
    assert [r["type"] for r in report["rows"] if r["leaf"]][:2] == ["Conv2D", "Conv2D"]


def test_tune(tmp_path):
    proc = gpulab("tune", "mlp", "--engine", "tensorflow", "--device", "cpu", "--budget", "10", "--steps", "4",
                  "--set", "options.samples=200", "--out", "tune", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert doc["engine"] == "tensorflow" and doc["trials"][0]["status"] == "ok"


def test_bench(tmp_path):
    proc = gpulab("bench", "matmul", "--engine", "tensorflow", "--smoke", "--device", "cpu", "--out", "bench",
                  cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert doc["suites"]["tf-matmul"]["status"] == "ok", doc["suites"]["tf-matmul"]


def test_doctor_passes_and_says_torch_is_an_extra(tmp_path):
    proc = gpulab("doctor", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["torch"]["status"] == "info" and "gpulab[torch]" in checks["torch"]["fix"]
    assert checks["tensorflow"]["status"] == "ok"


def test_a_torch_verb_names_the_extra_to_install(tmp_path):
    proc = gpulab("train", "mlp", "--max-steps", "1", "--out", "run", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpulab: error: PyTorch is not installed and this command needs it (the torch engine); "
        "fix: pip install 'gpulab[torch]', or use --engine tensorflow"
    ]
