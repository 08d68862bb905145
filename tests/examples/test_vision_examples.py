"""examples/torchvision_resnet.py and examples/timm_vit.py: a few steps on CPU and the loss falls; through
the CLI as a user runs them (a ViT with activation checkpointing and channels_last), killed inside the first
checkpoint and resumed byte-identically, then exported with parity.

torchvision loads only with the torch release it was built for (PyPI's torchvision for torch 2.13 is a CUDA
build whose C++ ops fail to register with the CPU torch: ``operator torchvision::nms does not exist``; timm
imports torchvision), so these run in their own venv, `make test-models`, and skip here with the reason.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpulab.core.recipes.base import load_recipe
from gpulab.engines.torch.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]  # examples/ is a package at the repository root
STEPS = 4


def require(module: str) -> None:
    """Skip unless ``module`` imports and runs here (an ImportError or a broken native build alike)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # torchvision's CUDA build raises RuntimeError at import on a CPU torch
        pytest.skip(f"{module} does not load with torch {torch.__version__}: {type(exc).__name__}: {exc}")


@pytest.mark.vision
@pytest.mark.parametrize(
    ("example", "needs", "steps"),
    [("torchvision_resnet", "torchvision", 6), ("timm_vit", "timm", 40)],  # a ViT starts slower
)
def test_a_vision_example_trains_on_the_upscaled_digits(
    example, needs, steps, monkeypatch, tmp_path, one_thread
):
    require(needs)
    monkeypatch.syspath_prepend(str(ROOT))
    torch.manual_seed(0)
    recipe = load_recipe(f"examples.{example}:build", {})
    Trainer(
        device="cpu", precision="fp32", max_steps=steps, batch_size=32, log_every=1,
        out_dir=str(tmp_path), tensorboard=False, progress=False, mfu=False, checkpoints=False,
    ).fit(recipe.model, recipe.train_data, loss_fn=recipe.loss_fn, optimizer=recipe.optimizer)  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == steps
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1, losses


def test_the_upscaled_digits_are_rgb_images_of_the_asked_size(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from examples.vision_digits import upscaled_digits

    (x, y), (xv, yv) = upscaled_digits(32)
    assert x.shape[1:] == (3, 32, 32) and xv.shape[1:] == (3, 32, 32)
    assert len(x) == len(y) and len(xv) == len(yv) and len(x) + len(xv) == 1797
    assert x.min() >= 0.0 and x.max() <= 1.0


CASES = {
    "resnet18": (
        "torchvision",
        "examples.torchvision_resnet:build",
        ["--set", "channels_last=true"],
        "model.onnx",
    ),
    "vit": (
        "timm",
        "examples.timm_vit:build",
        ["--set", "activation_checkpointing=Block", "--set", "channels_last=true"],
        "model.pt2",
    ),
}


def gpulab(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpulab", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def train(recipe: str, out: Path, extra: list[str], *more: str, env: dict | None = None):
    return gpulab(
        "train", recipe, "--out", str(out), "--device", "cpu", "--max-steps", str(STEPS),
        "--batch-size", "16", "--seed", "3", "--set", "checkpoint_every=2", "--set", "tensorboard=false",
        *extra, *more, env=env,
    )  # fmt: skip


def finished(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    return out


def final_weights(out: Path) -> bytes:
    return (out / "checkpoints" / f"step-{STEPS:08d}" / "model.safetensors").read_bytes()


@pytest.mark.vision
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_vision_example_trains_resumes_exactly_and_exports(case, tmp_path):
    needs, recipe, extra, artifact_name = CASES[case]
    require(needs)
    finished(train(recipe, tmp_path / "straight", extra))
    summary = json.loads((tmp_path / "straight" / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["channels_last"].startswith("on"), summary

    signal_file = tmp_path / "paused"
    pause = {
        "GPULAB_CHECKPOINT_PAUSE_AT": "before-latest",
        "GPULAB_CHECKPOINT_PAUSE_SIGNAL": str(signal_file),
    }
    killed = train(recipe, tmp_path / "resumed", extra, env=pause)  # stops inside its step-2 save
    deadline = time.monotonic() + 600
    while not signal_file.exists():
        assert killed.poll() is None, killed.communicate()[1][-4000:]
        assert time.monotonic() < deadline, "the run never reached its first checkpoint"
        time.sleep(0.05)
    killed.kill()
    killed.communicate()
    finished(train(recipe, tmp_path / "resumed", extra, "--resume", "latest"))
    assert final_weights(tmp_path / "resumed") == final_weights(tmp_path / "straight")

    artifact = tmp_path / artifact_name
    fmt = {".onnx": "onnx", ".pt2": "exported"}[artifact.suffix]
    # The user repeats the recipe the run names: a file never decides which code is imported (trust rule).
    export = (
        "export",
        str(tmp_path / "straight"),
        "--format",
        fmt,
        "--out",
        str(artifact),
        "--recipe",
        recipe,
    )
    finished(gpulab(*export))
    parity = json.loads(Path(f"{artifact}.parity.json").read_text())
    assert parity["passed"] and parity["top1_agreement"] == 1.0, parity
