"""Fixtures shared across the test tree."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Every process a test starts (gloo ranks, CLI runs) prints each thread's Python stack if it dies by a
# signal: a rank aborted by a native library then says where it was, not only "terminate called".
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
# transformers loads an installed TensorFlow (seconds) when a Hugging Face model is saved or loaded; the
# tests that prove gpulab's torch paths never import TensorFlow share worker processes with those tests.
os.environ.setdefault("USE_TF", "0")
# One compute thread per process: two xdist workers share two cores, and every process a test starts (CLI
# runs, gloo ranks, TensorFlow scenarios) would otherwise run a thread per core whose waits spin against
# the other worker's (tests/cli: 174 s -> 155 s on the 2-core VM). A test about threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# gpulab reads its test hooks (GPULAB_CHECKPOINT_PAUSE_AT, GPULAB_INJECT_OOM, ...) only when asked: the
# tests ask, for every process they start (tests/checkpoint/test_test_hooks.py proves a user's run does not).
os.environ.setdefault("GPULAB_TEST_HOOKS", "1")

# Seconds per file from a full run (scripts/test_durations.py): the longest files are handed out first.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order files longest first (each file's tests in their own order): with ``--dist loadfile
    --no-loadscope-reorder`` the two workers then take the long files early and finish together, instead
    of one starting a 200-second file while the other has nothing left. A file the table lacks goes last."""
    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}
    root = config.rootpath

    def cost(item: pytest.Item) -> float:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        return -seconds.get(path, 0)

    items.sort(key=cost)  # stable: a file's tests keep their order


@pytest.fixture
def restore_tf32_flags():
    """Put the process-wide TF32 / matmul-precision flags back after a test that may change them."""
    import torch  # in the fixtures: `make test-tf-only` collects tests/tf_only/ in a venv without torch

    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cuda.matmul.allow_tf32 = saved[1]
    torch.backends.cudnn.allow_tf32 = saved[2]


@pytest.fixture
def one_thread():
    """One intra-op thread for a small model on a shared 2-core runner: torch's threads waiting for each
    other made a tiny GPT-2's 8 steps take 6.4 s instead of 0.4 s at load 10."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def scenario():
    """``scenario(script, *args, env=None)``: run a test's scenario script in its own Python process (one
    TensorFlow import for many checks) and return the JSON it printed on its last ``RESULT `` line."""

    def run(script: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 400) -> Any:
        proc = subprocess.run(
            [sys.executable, str(script), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ) if env is None else env,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
        return json.loads(lines[-1].removeprefix("RESULT "))

    return run


# What a CPU `gpulab train` or `gpulab launch` of torch imports before its first step (torch._dynamo: the
# optimizer's first use), and W&B where installed: seconds a process of its own pays again on 2 cores.
FORK_PRELOAD = ["gpulab.cli", "gpulab.cli.train", "gpulab.cli.launch", "gpulab.engines.torch.train.run",
                "torch._dynamo", "gpulab.distributed.launch", "torch.distributed.run", "wandb"]  # fmt: skip


@pytest.fixture(scope="session")
def gpulab_server():
    """A fork server (tests/forked.py), one per test worker: ``gpulab_server.start("gpulab.cli:main", argv,
    stderr=..., ...)`` is a real process of its own (signalled, killed, exit code read) that did not import
    torch and gpulab again. The CPU only (CUDA_VISIBLE_DEVICES empty), one thread, unbuffered output; not
    for TensorFlow, not for MLflow (their imports start threads, after which no fork is safe)."""
    import importlib.util

    from forked import Forker

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PET_"))}
    env |= {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    server = Forker([m for m in FORK_PRELOAD if importlib.util.find_spec(m.split(".")[0])], env=env)
    yield server
    server.close()


@pytest.fixture
def cli(monkeypatch):
    """``cli(*argv, cwd=None, env=None) -> (exit code, stderr)``: ``gpulab ARGV`` through the CLI's entry point
    in this process, for a check that reads only what a process would leave (its exit code, stderr, files):
    a process of its own pays torch's and torch._dynamo's import again (seconds on 2 cores). ``cwd`` and
    ``env`` (a None value unsets) hold for the rest of the test. Warnings go to pytest's record, not stderr:
    a check of a warning's line keeps its own process."""
    from gpulab.cli import main

    def run(*argv: object, cwd: Path | None = None, env: dict[str, str | None] | None = None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        for name, value in (env or {}).items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
        return code, err.getvalue()

    return run


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size_bytes) -> Path``: a real small tmpfs mounted under ``tmp_path`` (a disk that really
    fills), unmounted after the test; ``tmpfs.resize(path, size_bytes)`` remounts it bigger. Skipped, with
    the reason, where mounting is not allowed (it needs root or CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def mount(size: int, name: str = "disk") -> Path:
        where = tmp_path / name
        where.mkdir()
        opts = f"size={size}"
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True)
        if proc.returncode:
            why = proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}"
            pytest.skip(f"cannot mount a small tmpfs here, so no real full disk ({why}): needs root")
        mounted.append(where)
        return where

    def resize(where: Path, size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True)

    mount.resize = resize
    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)
