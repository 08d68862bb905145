"""`gpulab train --resume` as a user meets it: finished runs, changed settings, corrupt checkpoints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def gpulab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True)


def train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``gpulab train mlp --out OUT ...``, or another recipe when ``extra`` starts with its name."""
    recipe, extra = (extra[0], extra[1:]) if extra and not extra[0].startswith("-") else ("mlp", extra)
    # --device cpu: what these runs compare (auto resolving to fp32, bit-exact losses) is the CPU's.
    return gpulab("train", recipe, "--out", str(out), "--device", "cpu", "--set", "tensorboard=false", *extra)


@pytest.fixture
def train_here(cli, capsys):
    """``train`` through the CLI's main() in this process, for the checks that read only what a process
    leaves: (exit code, stdout, stderr)."""

    def run(out: Path, *extra: str) -> tuple[int, str, str]:
        code, err = cli("train", "mlp", "--out", out, "--device", "cpu", "--set", "tensorboard=false", *extra)
        return code, capsys.readouterr().out, err

    return run


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """An mlp run of 30 steps with checkpoints at 10, 20 and 30 (copy it before changing it)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = train(out, "--max-steps", "30", "--set", "checkpoint_every=10", "--set", "keep_last=null")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def test_resuming_a_finished_run_says_so_and_leaves_the_summary(run_dir, train_here):
    before = {name: (run_dir / name).read_bytes() for name in ("summary.json", "metrics.jsonl")}
    code, out, err = train_here(run_dir, "--max-steps", "30", "--resume", "latest")
    assert code == 0, err
    assert "nothing to do" in out and "step 30 of 30" in out
    assert "Traceback" not in err
    assert {name: (run_dir / name).read_bytes() for name in before} == before


def test_resuming_a_finished_run_without_repeating_max_steps_changes_nothing(run_dir, train_here):
    """The run was set up with --max-steps 30; its resume takes that from the record, not the recipe's
    default (625), which trained on, pruned the finished checkpoint and rewrote the summary."""
    root = run_dir / "checkpoints"
    before = {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}
    code, out, err = train_here(run_dir, "--resume", "latest", "--set", "keep_last=1")
    assert code == 0, err
    assert "nothing to do" in out and "step 30 of 30" in out, out
    after = {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}
    assert after == before
    assert sorted(p.name for p in root.iterdir()) == [
        "latest",
        "step-00000010",
        "step-00000020",
        "step-00000030",
    ]


def test_a_setting_given_again_on_resume_is_still_checked(run_dir, train_here):
    code, _, err = train_here(run_dir, "--resume", "latest", "--seed", "7")
    assert code == 2 and "seed 0 -> 7" in err, err


def test_a_corrupt_latest_is_named_in_one_warning_and_kept_aside(run_dir):
    root = run_dir / "checkpoints"
    state = root / "step-00000030" / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum can tell
    state.write_bytes(bytes(data))
    proc = train(run_dir, "--max-steps", "30", "--resume", "latest", "--set", "keep_last=1")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("gpulab: warning: "), proc.stderr
    assert "step-00000030 refused" in warnings[0] and "state.pt: checksum mismatch" in warnings[0]
    assert f"resuming from {root / 'step-00000020'}" in warnings[0]
    aside = root / "step-00000030.refused"
    assert aside.is_dir() and (aside / "state.pt").read_bytes() == bytes(data)  # kept as it was
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from"] == str(root / "step-00000020")
    assert summary["refused_checkpoints"] == [
        {"path": str(root / "step-00000030"), "reason": warnings[0].split("(", 1)[1].split("), kept")[0],
         "kept_as": str(aside)}
    ]  # fmt: skip
    # keep_last=1 pruned everything else, but never the refused directory
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000030", "step-00000030.refused"]


def test_changed_recipe_options_are_refused_naming_them(run_dir, train_here):
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    code, _, err = train_here(run_dir, "--max-steps", "40", "--resume", "latest",
                              "--set", "options.lr=0.5", "--set", "options.data_seed=7")  # fmt: skip
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "options.data_seed (default) -> 7" in err and "options.lr (default) -> 0.5" in err
    assert "force_resume" in err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before


def test_precision_is_compared_as_resolved(run_dir, train_here):
    # the run asked for auto, which is fp32 on a CPU: asking for fp32 now is the same run
    code, _, err = train_here(run_dir, "--max-steps", "40", "--resume", "latest", "--precision", "fp32")
    assert code == 0, err
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 40


@pytest.mark.slow
def test_extending_a_scheduled_run_is_refused_naming_max_steps(tmp_path):
    out = tmp_path / "digits"
    assert train(out, "digits", "--max-steps", "6", "--set", "mfu=false").returncode == 0
    before = (out / "summary.json").read_bytes()
    proc = train(out, "digits", "--max-steps", "12", "--resume", "latest", "--set", "mfu=false")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "max_steps 6 -> 12 (the LR schedule was planned for 6 steps" in proc.stderr
    assert (out / "summary.json").read_bytes() == before
    # the planned length itself: nothing left, and it says why raising max_steps would not help
    proc = train(out, "digits", "--max-steps", "6", "--resume", "latest", "--set", "mfu=false")
    assert proc.returncode == 0 and "LR schedule is complete" in proc.stdout, proc.stderr


def test_resume_drops_the_records_logged_after_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    every = ("--set", "log_every=5", "--set", "checkpoint_every=10", "--set", "keep_last=null")
    assert train(out, "--max-steps", "30", *every).returncode == 0
    # as if killed just before step 30's checkpoint: resume from step 20 while 25 and 30 are logged
    proc = train(out, "--max-steps", "30", *every, "--resume", str(out / "checkpoints" / "step-00000020"))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [5, 10, 15, 20, 25, 30]  # no duplicates
    assert [r["step"] for r in records if "val_loss" in r] == [30]


def test_weights_are_written_with_the_umask_like_the_other_files(finished):
    step = finished / "checkpoints" / "step-00000030"
    modes = {p.name: p.stat().st_mode & 0o777 for p in step.iterdir()}
    assert modes["model.safetensors"] == modes["state.pt"] == modes["meta.json"], modes
