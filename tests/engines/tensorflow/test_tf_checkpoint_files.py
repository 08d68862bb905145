"""TensorFlow's own checkpoint files read before a resume restores anything: a truncated ``ckpt.index`` or
``ckpt.data-*`` under a MANIFEST rewritten to match is one line, the previous step used, and
``gpulab checkpoint inspect`` says INVALID (it once said valid and resume printed a 76-line traceback)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.checkpoint.io import write_manifest
from gpulab.engines.tensorflow.checkpoint_layout import TF_LAYOUT

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed"),
    pytest.mark.slow,
]
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}


def gpulab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, env=ENV)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tfrun") / "mlp"
    settings = ("--set", "checkpoint_every=3", "--set", "tensorboard=false")
    proc = gpulab("train", "mlp", "--engine", "tensorflow", "--out", str(out), "--max-steps", "6", *settings)
    assert proc.returncode == 0, proc.stderr
    return out


def _truncate(run: Path, name: str) -> Path:
    """Cut the newest checkpoint's file in half and rewrite its MANIFEST to match: the hashes verify."""
    step = run / "checkpoints" / "step-00000006"
    data = (step / name).read_bytes()
    (step / name).write_bytes(data[: len(data) // 2])
    write_manifest(step, TF_LAYOUT)
    return step


def test_a_truncated_data_file_is_one_line_and_the_previous_step_resumes(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    _truncate(run, "ckpt.data-00000-of-00001")
    proc = gpulab(
        "train", "mlp", "--engine", "tensorflow", "--out", str(run), "--max-steps", "8", "--resume", "latest"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("gpulab:")]
    assert len(said) == 1 and "step-00000006 refused" in said[0] and "TensorFlow cannot read" in said[0]
    assert said[0].endswith(str(run / "checkpoints" / "step-00000003"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["resumed_from"].endswith("step-00000003")
    assert (run / "checkpoints" / "step-00000006.refused" / "ckpt.index").is_file()  # kept, not deleted


def test_inspect_reads_the_files_and_says_invalid(trained, tmp_path, cli, capsys):
    """(through the CLI's main() in this process: exit code and output are all it reads)"""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    step = _truncate(run, "ckpt.index")
    assert cli("checkpoint", "inspect", step, "--json")[0] == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["valid"] and len(report["problems"]) == 1
    assert "TensorFlow cannot read" in report["problems"][0]
    assert cli("checkpoint", "inspect", run / "checkpoints" / "step-00000003")[0] == 0


def test_a_manifest_that_omits_the_data_shard_is_refused(trained, tmp_path):
    from gpulab.engines.torch.state.api import inspect_checkpoint

    step = tmp_path / "step-00000006"
    shutil.copytree(trained / "checkpoints" / "step-00000006", step)
    (step / "ckpt.data-00000-of-00001").unlink()
    write_manifest(step, TF_LAYOUT)  # lists what is left: ckpt.index and meta.json
    report = inspect_checkpoint(step)
    assert not report["valid"] and "does not list ckpt.data-00000-of-00001" in report["problems"][0]


def test_the_summary_and_the_checkpoint_record_the_same_settings(trained):
    """mfu: the summary said true (RunConfig's default) where the checkpoint said false (this engine
    measures none), and a resume that took the summary's settings was refused."""
    summary = json.loads((trained / "summary.json").read_text())["config"]
    meta = json.loads((trained / "checkpoints" / "step-00000006" / "meta.json").read_text())["config"]
    shared = sorted(set(summary) & set(meta) - {"resume", "overwrite"})
    assert "mfu" in shared and summary["mfu"] is False
    assert {k: summary[k] for k in shared} == {k: meta[k] for k in shared}
