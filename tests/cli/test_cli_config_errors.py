"""A mistake in a setting, as `gpulab train` meets it in a real process: one line per mistake (all of them,
not the first only), exit 2, no traceback -- whether it comes from --set or from a --config file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def gpulab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", "train", "mlp", "--out", "run", "--max-steps", "2", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ),
        timeout=300,
    )


def _lines(proc: subprocess.CompletedProcess, count: int) -> list[str]:
    """``count`` lines on stderr, each a gpulab error, exit 2, and no run started."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == count, proc.stderr
    assert all(line.startswith("gpulab: error: ") for line in lines), proc.stderr
    return lines


def test_a_seed_that_is_not_a_number_is_one_line(tmp_path):
    (line,) = _lines(gpulab("--set", "seed=abc", cwd=tmp_path), 1)
    assert "'seed' = 'abc'" in line and "valid integer" in line
    assert not (tmp_path / "run").exists()


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "run.yaml").write_bytes(b"epochs: 2\n# caf\xe9 au lait\n")
    (line,) = _lines(gpulab("--config", "run.yaml", cwd=tmp_path), 1)
    assert "'run.yaml' is not UTF-8 text" in line and "line 2" in line


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "checkpoint_every=yes"],
        ["--set", "epochs=true"],
        ["--set", "options.samples=on"],
        ["--config"],
    ],
    ids=["set-int", "set-epochs", "set-recipe-option", "yaml"],
)
def test_a_boolean_for_a_number_is_refused(tmp_path, args):
    """YAML reads yes/on/true as True, which pydantic would take as 1 (a checkpoint every step)."""
    if args == ["--config"]:
        (tmp_path / "run.yaml").write_text("checkpoint_every: yes\n")
        args = ["--config", "run.yaml"]
    (line,) = _lines(gpulab(*args, cwd=tmp_path), 1)
    assert "= True is invalid" in line and "not a boolean" in line
    assert not (tmp_path / "run").exists()


def test_a_key_given_twice_names_the_key_and_both_lines(tmp_path):
    (tmp_path / "run.yaml").write_text("epochs: 2\nseed: 1\nepochs: 3\noptions:\n  lr: 0.1\n  lr: 0.2\n")
    first, second = _lines(gpulab("--config", "run.yaml", cwd=tmp_path), 2)
    assert "key 'epochs' is given twice, at line 1 and line 3" in first
    assert "key 'lr' is given twice, at line 5 and line 6" in second


def test_every_mistake_in_a_file_is_told_at_once(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "epochs: 0\nprecision: fp17\nbatchsize: 3\ncheckpoint_every: yes\noptions:\n  lr: -1\n"
    )
    lines = _lines(gpulab("--config", "run.yaml", cwd=tmp_path), 5)
    told = "\n".join(lines)
    for part in (
        "'epochs' = 0",
        "'precision' = 'fp17'",
        "'batchsize'",
        "'checkpoint_every' = True",
        "'options.lr'",
    ):
        assert part in told, told


def test_thousands_of_unknown_keys_are_told_as_unknown_keys_not_as_an_alias_bomb(tmp_path):
    # 5,000 keys written out passed the YAML expansion bound and got its "through aliases" message
    (tmp_path / "run.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(5000)))
    (line,) = _lines(gpulab("--config", "run.yaml", cwd=tmp_path), 1)
    assert line.startswith(
        "gpulab: error: config file 'run.yaml': 5,000 unknown settings ('k0', 'k1', 'k2' and 4,997 more): "
        "is this a gpulab config? valid settings: device|precision|"
    ), line
    assert "alias" not in line and "expands" not in line
    assert not (tmp_path / "run").exists()
