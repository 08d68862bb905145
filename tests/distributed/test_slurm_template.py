"""The sbatch script's time limit, warning, array and interpreter (cluster_templates.py, slurm_time.py); the
node's part of the script is run by a real bash with SLURM's variables set (test_slurm.py runs it on a
cluster)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from gpulab.cli import main
from gpulab.distributed.slurm_time import parse_time, warning_grace
from gpulab.errors import LaunchError

PRINT = ["launch", "--print", "slurm", "--nnodes", "2", "--nproc-per-node", "1", "--gpus-per-node", "0"]


def script(capsys, *args: str) -> list[str]:
    assert main([*PRINT, *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_slurm_times_read_as_sbatch_reads_them():
    assert [parse_time(t) for t in ("30", "2:30", "00:02:00", "1-0", "1-2:03", "1-02:03:04")] == [
        1800, 150, 120, 86400, 93780, 93784,
    ]  # fmt: skip
    with pytest.raises(LaunchError, match="--time 'soon' is not a SLURM time limit"):
        parse_time("soon")


def test_the_warning_follows_the_time_limit(capsys):
    """SLURM may signal 60 s early: a 2-minute job is warned 30 s before its end (0-60 s of training, at
    least as long as it has to save), a long one 90 s; an explicit grace wins."""
    assert warning_grace(None, None) == 90 and warning_grace(3600, None) == 90
    assert warning_grace(120, None) == 30 and warning_grace(120, 45) == 45
    lines = script(capsys, "--time", "00:02:00", "--", "gpulab", "train", "mlp")
    assert "#SBATCH --time=00:02:00" in lines and "#SBATCH --signal=USR1@30" in lines


def test_a_limit_too_short_to_save_in_is_one_line(capsys):
    assert main([*PRINT, "--time", "00:01:00", "--", "gpulab", "train", "mlp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpulab: error: --time 00:01:00 is too short to save a checkpoint in before it ends (SLURM's warning "
        "may come 60 s early): give --time 00:01:30 or more, or --no-requeue"
    ]
    assert main([*PRINT, "--time", "00:01:00", "--no-requeue", "--", "gpulab", "train", "mlp"]) == 0
    assert main([*PRINT, "--time", "2", "--requeue-grace", "120", "--", "gpulab", "train", "mlp"]) == 2
    assert "--requeue-grace 120 is not shorter than --time 00:02:00" in capsys.readouterr().err


def node_command(lines: list[str], tmp_path, **env: str) -> list[str]:
    """The words the node's bash passes to gpulab's interpreter (a script that prints them), with ENV set
    as srun sets it."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    srun = shlex.split(next(line for line in lines if line.startswith("srun ")))
    assert srun[2:4] == ["bash", "-c"]
    node = {**os.environ, "GPULAB_PYTHON": str(fake), "SLURM_NNODES": "2", "SLURM_NODEID": "1",
            "SLURM_JOB_ID": "71", "GPULAB_RDZV_HOST": "n1", "GPULAB_RDZV_PORT": "29400", **env}  # fmt: skip
    done = subprocess.run(["bash", "-c", srun[4]], env=node, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_arrays_index_reaches_each_elements_out(capsys, tmp_path):
    lines = script(capsys, "--array", "0-1", "--", "gpulab", "train", "mlp", "--out", "runs/a-$SLURM_ARRAY_TASK_ID",
                   "--set", "note=it's $HOME `x` \"q\"")  # fmt: skip
    assert "#SBATCH --array=0-1" in lines and "#SBATCH --output=%x-%A_%a.out" in lines
    for index in ("0", "1"):
        words = node_command(lines, tmp_path, SLURM_ARRAY_TASK_ID=index)
        user = words[words.index("--") + 1 :]
        # the index expanded; everything else exactly as given
        assert user == [
            "gpulab",
            "train",
            "mlp",
            "--out",
            f"runs/a-{index}",
            "--set",
            'note=it\'s $HOME `x` "q"',
        ]
        assert words[words.index("--node-rank") + 1] == "1" and words[words.index("--rdzv-id") + 1] == "71"


def test_an_array_whose_elements_would_share_one_out_is_one_line(capsys):
    assert main([*PRINT, "--array", "0-1", "--", "gpulab", "train", "mlp", "--out", "runs/a"]) == 2
    err = capsys.readouterr().err
    assert "--array: every element would train into the same --out" in err and len(err.splitlines()) == 1
    assert main([*PRINT, "--array", "soon", "--", "t.py"]) == 2
    assert "--array 'soon' is not a SLURM array; e.g. 0-3" in capsys.readouterr().err


def test_the_script_runs_gpulabs_own_interpreter_and_environment(capsys):
    lines = script(capsys, "--", "gpulab", "train", "mlp")
    assert f"export GPULAB_PYTHON={shlex.quote(sys.executable)}" in lines
    if sys.prefix != sys.base_prefix:  # a virtual environment: what activating it does
        assert f"export VIRTUAL_ENV={shlex.quote(sys.prefix)}" in lines
        assert 'export PATH="$VIRTUAL_ENV/bin:$PATH"' in lines
    assert any("change these lines" in line or "change this line" in line for line in lines)


@pytest.mark.parametrize(
    ("srun_status", "srun_said", "requeued"),
    [
        (143, "srun: error: n2: task 1: User defined signal 1\nsrun: error: n1: task 0: Terminated", True),
        (1, "srun: error: n1: task 0: Exited with exit code 1", False),  # gpulab requeues it itself
        (0, "", False),
    ],
)
def test_a_task_killed_by_the_warning_while_starting_requeues_the_job(
    capsys, tmp_path, srun_status, srun_said, requeued
):
    """The whole script run by bash, srun and scontrol scripts on PATH: a task srun says died of SIGUSR1
    (before gpulab held it; srun's status may be the task it killed after) requeues the job; any other end
    does not. srun's lines still reach the log."""
    lines = script(capsys, "--", "gpulab", "train", "mlp")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = f"printf '%s\\n' '{srun_said}' >&2; exit {srun_status}" if srun_said else f"exit {srun_status}"
    for name, body in {
        "srun": srun,
        "scontrol": f'echo "$@" >> {tmp_path / "calls"}',
        "hostname": "echo n1",
    }.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "71",
           "SLURM_JOB_NODELIST": "n[1-2]"}  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", "\n".join(lines)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == srun_status
    calls = (tmp_path / "calls").read_text().splitlines()
    assert ("requeue 71" in calls) == requeued, calls
    assert ("requeueing SLURM job 71" in done.stdout) == requeued, done.stdout
    assert all(line in done.stdout for line in srun_said.splitlines())
