"""What is checked before work starts: `gpulab launch` checks the command it would start on every rank
(one line, once, no rank started); an --out nothing can be written to is one line; `--resume latest` into
a run killed during its start-up (only an empty checkpoints/) starts from step 0 with a line."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabWarning

QUIET = ["--set", "tensorboard=false", "--set", "mfu=false", "--set", "progress=false"]


def gpulab(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["gpulab", "train", "digitz"], "gpulab: error: unknown recipe 'digitz'; valid: mlp|digits|chargpt"),
        (["gpulab", "train", "mlp", "--set", "batch_size=0"], "gpulab: error: setting 'batch_size' = 0"),
        (
            ["python", "-m", "gpulab", "train", "mlp", "--out", "f/run"],
            "gpulab: error: --out 'f/run': 'f' is a file",
        ),
        (
            ["gpulab", "trian", "mlp"],
            "gpulab: error: the launched command: gpulab has no verb 'trian' (did you mean",
        ),
        (
            ["gpulab", "train", "mlp", "--max-steps", "abc"],
            "gpulab: error: train: Invalid value for '--max-steps'",
        ),
    ],
    ids=["recipe", "setting", "path", "verb", "usage"],
)
def test_launch_checks_the_command_once_before_any_rank_starts(tmp_path, command, said):
    (tmp_path / "f").write_text("a file where a directory would go")
    proc = gpulab("launch", "--nproc-per-node", "2", "--", *command, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.splitlines()[0]] and proc.stderr.startswith(said)
    assert "gpulab launch:" not in proc.stderr  # the plan line: torchrun was never started


def test_launch_refuses_a_train_flag_train_does_not_have_as_train_would(tmp_path):
    """Parsed by train's own command: its one usage line, exit 2, no rank started."""
    proc = gpulab("launch", "--nproc-per-node", "2", "--", "gpulab", "train", "mlp", "--bogus", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert (
        proc.stderr.startswith("gpulab: error: train: No such option: --bogus")
        and "gpulab train --help" in proc.stderr
    )
    assert "gpulab launch:" not in proc.stderr and not (tmp_path / "runs").exists()


def test_an_out_on_a_read_only_file_system_is_one_line(tmpfs, capsys):
    import subprocess as sp

    disk = tmpfs(1 << 20)
    sp.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    code = main(["train", "mlp", "--out", str(disk / "run"), "--max-steps", "2", *QUIET])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [
        f"gpulab: error: --out '{disk / 'run'}': '{disk}' is on a read-only file system; give a directory you "
        "can write to"
    ]


def test_resume_latest_after_a_kill_during_start_up_starts_from_step_zero(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)  # all a run killed during its start-up left
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["train", "mlp", "--out", str(out), "--max-steps", "3", "--resume", "latest", *QUIET])
    assert code == 0, capsys.readouterr().err
    said = [str(w.message) for w in caught if issubclass(w.category, GpulabWarning)]
    assert said == [
        f"no checkpoint under {out / 'checkpoints'} yet (the run stopped before its first): starting from step 0"
    ]
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    # A directory no run ever used is still refused: there is nothing to continue.
    (tmp_path / "new").mkdir()
    assert main(["train", "mlp", "--out", str(tmp_path / "new"), "--resume", "latest", *QUIET]) == 2
    assert "holds no run to continue" in capsys.readouterr().err
