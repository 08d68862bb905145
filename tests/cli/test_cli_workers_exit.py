"""A run with DataLoader worker processes ends when its fit ends, and a killed one leaves nothing that refuses
its resume. Both were found by new users (2026-11-28): ``--set num_workers=2`` printed its last step and
summary, then hung in ``SignalWatch.__exit__`` (the forked workers held the write end of its pipe); after a
kill -9 the lingering workers held the run's lock, so ``--resume latest`` was refused for about a minute."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_cli_recipe import console_script

RECIPE = """
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from gpulab.core.recipes.base import Recipe


class Squares(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(8, generator=g)
        return x, (x.sum() > 0).long()


class Stream(IterableDataset):
    # sharded over workers as the torch docs show: each worker takes every n-th item
    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, 256, step):
            yield Squares()[i]


class Net(nn.Module):
    def __init__(self, pause):
        super().__init__()
        self.pause, self.net = pause, nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        time.sleep(self.pause)
        return self.net(x)


def build(options):
    kind = options.get("data", "dataset")
    if kind == "persistent":
        data = DataLoader(Squares(), batch_size=16, shuffle=True, num_workers=2, persistent_workers=True,
                          generator=torch.Generator().manual_seed(0))
    elif kind == "stream":
        data = DataLoader(Stream(), batch_size=16, num_workers=2)
    else:
        data = Squares()  # gpulab's own loader, num_workers from --set
    torch.manual_seed(0)
    return Recipe(model=Net(float(options.get("pause", 0))), train_data=data,
                  loss_fn=nn.functional.cross_entropy,
                  optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
                  defaults={"batch_size": 16, "tensorboard": False, "device": "cpu", "log_every": 4})
"""

# Generous: a busy 2-core runner starting torch and two workers; a hang never ends at all.
EXIT_WITHIN_S = 240


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ) | {"CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, str(console_script()), "train", "loaders:build", *args]
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def recipe(tmp_path):
    (tmp_path / "loaders.py").write_text(textwrap.dedent(RECIPE))
    return tmp_path


@pytest.mark.parametrize(
    "setting",
    [("--set", "num_workers=2"), ("--set", "options.data=persistent"), ("--set", "options.data=stream")],
    ids=["gpulab-loader-workers", "user-persistent-workers", "iterable-sharded-over-workers"],
)
def test_a_run_with_loader_workers_exits_after_its_last_step(recipe, setting):
    length = ("--max-steps", "16") if "stream" in setting[-1] else ("--epochs", "1")  # a stream has no epoch
    proc = start(recipe, *length, "--out", "run", *setting)
    try:
        out, err = proc.communicate(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"gpulab train did not exit after its fit: {err[-1500:]}")
    assert proc.returncode == 0, err[-2000:]
    assert json.loads((recipe / "run" / "summary.json").read_text())["steps"] == 16


def test_a_killed_run_whose_workers_linger_resumes_at_once(recipe):
    """kill -9 of the run's process only: its persistent workers outlive it for a while (they notice the
    parent's death by polling); the lock knows the run's own process has gone."""
    args = (
        "--out",
        "run",
        "--set",
        "options.data=persistent",
        "--set",
        "options.pause=0.05",
        "--set",
        "checkpoint_every=4",
    )
    proc = start(recipe, "--max-steps", "400", *args)
    workers = []
    try:
        saved = recipe / "run" / "checkpoints" / "step-00000008"
        while not saved.is_dir():  # the event: step 8's checkpoint is complete (renamed into place)
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        workers = [int(c) for c in children]
        assert workers, "the run has no worker processes to linger"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        resumed = start(recipe, "--max-steps", "12", "--resume", "latest", *args)
        _, err = resumed.communicate(timeout=EXIT_WITHIN_S)
        assert resumed.returncode == 0, err[-2000:]
        assert "in use by another run" not in err
    finally:
        proc.kill()
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
