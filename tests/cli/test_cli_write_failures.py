"""Every place gpulab cannot write, every checkpoint it cannot read, every test hook set wrong: one line
naming the place and the fix, exit 2, nothing half-written left (issue 40: each was a traceback of 46 to 78
lines). As root, mode bits stop nothing: a read-only tmpfs stands for a read-only disk, and a folder of
mode 555 or a file of mode 000 is tried by an unprivileged user (``setpriv``), skipped where neither is
possible."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from tree_hash import tree_hash

from gpulab.engines.torch.state.api import capture_rng, save_checkpoint

QUIET = ["--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"]
NOBODY = 65534


def _save(root: Path, step: int) -> None:
    torch.manual_seed(step)
    state = {"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}}
    save_checkpoint(root, step=step, model_state=torch.nn.Linear(4, 2).state_dict(), state=state, meta={})


@pytest.fixture
def run(tmp_path) -> Path:
    for step in (1, 2):
        _save(tmp_path / "run" / "checkpoints", step)
    (tmp_path / "m.onnx").write_bytes(b"an artifact: never read, the --out is refused first")
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 4), np.float32))
    return tmp_path / "run"


@pytest.fixture
def read_only(tmpfs) -> Path:
    disk = tmpfs(1 << 20)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    return disk


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _writes(run: Path, where: Path) -> dict[str, list]:
    """Each verb that writes, told to write at ``where`` (a file name, or a folder for the report verbs)."""
    top = run.parent
    return {
        "export": ["export", run, "--format", "onnx", "--out", where / "m.onnx"],
        "checkpoint export": ["checkpoint", "export", run, "--to", where / "w.safetensors"],
        "infer": ["infer", top / "m.onnx", "--input", top / "in.npz", "--out", where / "p.npz"],
        "profile": ["profile", "mlp", "--out", where / "prof", "--device", "cpu", "--no-peak"],
        "bench": ["bench", "matmul", "--smoke", "--out", where / "bench", "--device", "cpu"],
        "tune": ["tune", "mlp", "--out", where / "tune"],
    }


@pytest.mark.parametrize("verb", list(_writes(Path("r"), Path("w"))))
def test_a_read_only_disk_is_one_line_before_any_work(run, read_only, verb, cli):
    code, err = cli(*_writes(run, read_only)[verb])
    assert code == 2 and f"cannot write in {read_only}: the file system is read-only" in _one_line(err)


@pytest.mark.parametrize("verb", list(_writes(Path("r"), Path("w"))))
def test_a_path_under_a_file_is_one_line(run, verb, cli):
    afile = run.parent / "afile"
    afile.write_text("a user's file where a folder would go")
    before = tree_hash(run.parent)
    code, err = cli(*_writes(run, afile)[verb])
    assert code == 2 and f"{afile} is a file, not a folder" in _one_line(err)
    assert tree_hash(run.parent) == before


def test_exported_without_pt2_is_one_line(run, cli):
    code, err = cli("export", run, "--format", "exported", "--out", run.parent / "noext")
    assert code == 2 and "format exported needs a file name ending in .pt2" in _one_line(err)


# --- as a user whom mode bits stop --------------------------------------------------------------------------


@pytest.fixture
def shared(run):
    """(a folder an unprivileged user can reach, holding ``run`` and its files: pytest's own temporary
    folder is root's alone; ``as_user(*argv)``, which runs ``gpulab ARGV`` as that user)."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root without setpriv: no user whom mode bits stop")
    top, home = Path(tempfile.mkdtemp(prefix="gpulab-modes-")), Path(tempfile.mkdtemp(prefix="gpulab-home-"))
    home.chmod(0o777)  # the user's caches (torch's, matplotlib's) go there, not into the tree compared
    shutil.copytree(run.parent, top, dirs_exist_ok=True, symlinks=True)
    for path in [top, *top.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    src = Path(__file__).parents[2] / "src"

    def as_user(*argv) -> subprocess.CompletedProcess:
        drop = (
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            if os.geteuid() == 0
            else []
        )
        env = {
            **os.environ,
            "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "HOME": str(top),
        }
        return subprocess.run([*drop, sys.executable, "-m", "gpulab", *map(str, argv)], capture_output=True,
                              text=True, cwd=top, env=env, timeout=300)  # fmt: skip

    yield top, as_user
    for folder in (top, home):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("verb", ["export", "checkpoint export", "infer", "profile"])
def test_a_folder_of_mode_555_is_one_line(shared, verb):
    shared, as_user = shared
    locked = shared / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    before = tree_hash(shared)
    proc = as_user(*_writes(shared / "run", locked)[verb])
    assert proc.returncode == 2 and f"cannot write in {locked}: permission denied" in _one_line(proc.stderr)
    assert tree_hash(shared) == before


@pytest.mark.parametrize("verb", ["checkpoint inspect", "train --resume"])
def test_an_unreadable_latest_checkpoint_is_one_line_and_is_not_set_aside(shared, verb):
    shared, as_user = shared
    weights = shared / "run" / "checkpoints" / "step-00000002" / "model.safetensors"
    weights.chmod(0)
    before = tree_hash(shared)
    argv = {
        "checkpoint inspect": ["checkpoint", "inspect", shared / "run"],
        "train --resume": [
            "train",
            "mlp",
            "--out",
            shared / "run",
            "--resume",
            "latest",
            "--max-steps",
            "3",
            *QUIET,
        ],
    }[verb]
    proc = as_user(*argv)
    assert proc.returncode == 2 and f"{weights}: unreadable" in _one_line(proc.stderr)
    assert "give this user read permission on it" in proc.stderr
    assert tree_hash(shared) == before  # not renamed step-00000002.refused, no step 1 resumed


# --- test hooks ---------------------------------------------------------------------------------------------


def test_test_hooks_are_read_only_when_tests_ask_and_a_bad_one_is_one_line(tmp_path, cli):
    argv = ["train", "mlp", "--max-steps", "2", "--set", "checkpoint_every=1", *QUIET]
    hook = {"GPULAB_CHECKPOINT_PAUSE_AT": "after-weights", "GPULAB_CHECKPOINT_PAUSE_SECONDS": "abc"}
    assert cli(*argv, "--out", tmp_path / "user", env={**hook, "GPULAB_TEST_HOOKS": None}) == (0, "")
    code, err = cli(*argv, "--out", tmp_path / "tests", env={"GPULAB_TEST_HOOKS": "1"})
    assert code == 2 and "GPULAB_CHECKPOINT_PAUSE_SECONDS='abc': expected seconds" in _one_line(err)


def test_the_oom_hook_is_read_only_when_tests_ask(monkeypatch):
    from gpulab.engines.torch.runtime.oom import injected_attempts

    monkeypatch.setenv("GPULAB_INJECT_OOM", "0:1")
    monkeypatch.delenv("GPULAB_TEST_HOOKS")
    assert injected_attempts(0) == set()
    monkeypatch.setenv("GPULAB_TEST_HOOKS", "1")
    assert injected_attempts(0) == {1}
