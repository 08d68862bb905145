"""A fit that fails inside the loop, in a real `gpulab train` process: the user's own traceback stays (a
forward that raises is their bug), and it ends with one gpulab line naming the step, the batch, its shapes
and the checkpoint that is safe to resume from (or that there is none yet)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RECIPE = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gpulab.core.recipes.base import Recipe


    class Model(nn.Module):
        def __init__(self, mode):
            super().__init__()
            self.net, self.mode, self.calls = nn.Linear(4, 1), mode, 0

        def forward(self, x):
            if self.training:
                self.calls += 1
                if self.calls == 45 and self.mode == "raise":
                    raise ValueError("my model fails at its 45th call")
                if self.calls == 45 and self.mode == "oom":
                    torch.empty(2**60, dtype=torch.uint8)  # more than any host has
            return self.net(x)


    def build(options):
        mode = options["mode"]
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(400, 4, generator=g), torch.randn(400, 1, generator=g)
        data = (x, y)
        if mode == "shape":  # the 45th batch of 8 (samples 352..359) has 5 features, not 4
            wide = torch.randn(8, 5, generator=g)
            items = [(x[i], y[i]) for i in range(352)] + [(wide[i], y[352 + i]) for i in range(8)]
            data = DataLoader(items, batch_size=8)
        return Recipe(
            model=Model(mode),
            train_data=data,
            loss_fn=nn.functional.mse_loss,
            optimizer=lambda p: torch.optim.SGD(p, lr=0.01),
            defaults={"batch_size": 8, "epochs": 2},
        )
    """
)


def gpulab(tmp_path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "failing_recipe.py").write_text(RECIPE)
    args = ["train", "failing_recipe:build", "--out", "run", "--set", f"options.mode={mode}", *extra]
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])},
        timeout=300,
    )


def _last_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr  # a bug, not a user's setting: exit 1, traceback kept
    assert "Traceback" in proc.stderr
    return proc.stderr.rstrip().splitlines()[-1]


def test_a_forward_raising_at_step_45_keeps_its_traceback_and_names_the_step_and_checkpoint(tmp_path):
    proc = gpulab(tmp_path, "raise", "--set", "checkpoint_every=20")
    assert "ValueError: my model fails at its 45th call" in proc.stderr
    assert 'failing_recipe.py", line' in proc.stderr  # the user's frame is in the traceback
    line = _last_line(proc)
    assert line.startswith(
        "gpulab: the fit failed in step 45 (epoch 1, batch 45/50: (8, 4) float32, (8, 1) float32)"
    )
    assert line.endswith(f"safe to resume from {Path('run/checkpoints/step-00000040')} (--resume latest)")


def test_a_batch_of_another_shape_mid_epoch_is_named_with_its_shapes(tmp_path):
    proc = gpulab(tmp_path, "shape")
    assert "mat1 and mat2 shapes cannot be multiplied" in proc.stderr
    line = _last_line(proc)
    assert "in step 45 (epoch 1, batch 45/45: (8, 5) float32, (8, 1) float32)" in line, line
    assert line.endswith("no checkpoint yet to resume from"), line


@pytest.mark.parametrize("checkpoints", ["on", "off"])
def test_running_out_of_host_memory_names_the_step_and_what_to_change(tmp_path, checkpoints):
    extra = ["--set", "checkpoint_every=10"] if checkpoints == "on" else ["--set", "checkpoints=false"]
    proc = gpulab(tmp_path, "oom", *extra)
    assert "can't allocate memory" in proc.stderr
    line = _last_line(proc)
    assert line.startswith("gpulab: the fit failed in step 45 (epoch 1, batch 45/50: (8, 4) float32"), line
    assert "out of memory: a smaller batch_size" in line
    end = (
        f"safe to resume from {Path('run/checkpoints/step-00000040')} (--resume latest)"
        if checkpoints == "on"
        else "no checkpoint (checkpoints are off)"
    )
    assert line.endswith(end), line
