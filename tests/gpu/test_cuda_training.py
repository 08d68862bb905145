"""The CUDA paths end to end, as a user runs them: skipped without a GPU (CI has none); run on a lent
GPU machine with ``pytest -m gpu``. Each test here guards a path that CPU tests only reach through fakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def weights(run: Path) -> dict[str, torch.Tensor]:
    latest = (run / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run / "checkpoints" / latest / "model.safetensors"))


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "fp16-mixed"])
def test_resume_on_cuda_is_bit_exact_with_dropout(tmp_path, precision):
    """CPU and CUDA generators both restored: dropout masks after the resume are the ones never stopped."""
    common = ["digits", "--device", "cuda", "--precision", precision, "--max-steps", "40",
              "--set", "checkpoint_every=20", "--set", "keep_last=null", "--set", "deterministic=true"]  # fmt: skip
    gpulab("train", *common, "--out", str(tmp_path / "straight"), cwd=tmp_path)
    half = tmp_path / "straight" / "checkpoints" / "step-00000020"
    assert half.is_dir()
    gpulab("train", *common, "--out", str(tmp_path / "resumed"), "--resume", str(half), cwd=tmp_path)
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight), "weights differ after resume"


def test_train_on_cuda_reports_the_gpu_and_its_memory(tmp_path):
    gpulab(
        "train", "mlp", "--device", "cuda", "--max-steps", "30", "--out", str(tmp_path / "run"), cwd=tmp_path
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["device"].startswith("cuda")
    assert summary["memory"]["kind"] == "allocator" and summary["peak_memory_bytes"] > 0
    assert summary["nvml"]["available"] is True  # utilisation sampled through NVML on a real GPU


def test_compiled_with_cuda_graphs_trains_like_eager(tmp_path):
    """compile_mode reduce-overhead (CUDA graphs) really compiles and lands near eager's loss."""
    base = ["mlp", "--device", "cuda", "--precision", "fp32", "--max-steps", "60", "--set", "mfu=false"]
    gpulab("train", *base, "--out", str(tmp_path / "eager"), cwd=tmp_path)
    gpulab("train", *base, "--compile", "--set", "compile_mode=reduce-overhead", "--out", str(tmp_path / "graphs"),
           cwd=tmp_path)  # fmt: skip
    eager = json.loads((tmp_path / "eager" / "summary.json").read_text())
    graphs = json.loads((tmp_path / "graphs" / "summary.json").read_text())
    assert graphs["compiled"] is True  # no fallback to eager
    assert abs(graphs["final_loss"] - eager["final_loss"]) < 0.05


def test_data_parallel_on_one_gpu_computes_in_bf16(tmp_path):
    """Legacy DataParallel's replicas run under the run's autocast dtype, not fp16 without a scaler."""
    from torch import nn

    from gpulab.engines.torch.runtime import Runtime

    seen: list[torch.dtype] = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            seen.append(y.dtype)
            return y

    with pytest.warns(UserWarning):
        rt = Runtime("cuda", precision="bf16-mixed", strategy="dp")
    model, _ = rt.setup(Probe())
    with rt.autocast():
        model(torch.randn(4, 8, device="cuda"))
    assert seen and set(seen) == {torch.bfloat16}
