"""`gpulab train` as a user meets it, in real processes: the summary.json / metrics.jsonl contract, one-line
errors with exit code 2 for every kind of bad input, and a user's own recipe from a YAML config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SUMMARY_KEYS = {
    "recipe",
    "device",
    "precision",
    "steps",
    "epochs",
    "final_loss",
    "samples_per_s",
    "peak_memory_bytes",
    "accuracy",
}
PRECISION_CHOICES = "auto|fp32|tf32|bf16-mixed|fp16-mixed"


def gpulab(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_train_writes_summary_and_metrics(tmp_path):
    out = tmp_path / "run"
    proc = gpulab(
        "train", "mlp", "--out", str(out), "--max-steps", "20", "--set", "log_every=5", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "mlp: 20 steps, 1 epoch on " in proc.stdout  # not "1 epochs"

    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["recipe"] == "mlp" and summary["steps"] == 20 and summary["epochs"] == 1
    assert summary["precision"] in PRECISION_CHOICES.split("|")
    assert isinstance(summary["device"], str) and summary["device"]
    assert summary["final_loss"] > 0 and summary["samples_per_s"] > 0 and summary["peak_memory_bytes"] > 0
    assert 0.5 <= summary["accuracy"] <= 1.0
    # What the Runtime chose and why; torch's Adam left open runs on its fused kernels.
    assert summary["runtime"]["device"] == summary["device"]
    assert "fused kernels" in summary["runtime"]["reasons"]["optimizer"]

    records = _records(out / "metrics.jsonl")
    training = [r for r in records if "loss" in r]
    validation = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in training] == [5, 10, 15, 20]
    assert all({"epoch", "loss", "lr"} <= r.keys() for r in training)
    assert [r["step"] for r in validation] == [20]  # a max_steps stop validates once, at the end
    assert 0.0 <= validation[0]["val_accuracy"] <= 1.0
    assert len(records) == len(training) + len(validation)
    assert (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir())

    # stdout is a pipe here: the summary lines, no progress bar
    assert "mlp: 20 steps" in proc.stdout and "summary.json" in proc.stdout
    assert "━" not in proc.stdout and "━" not in proc.stderr


BAD_INPUTS = {
    "precision": (["mlp", "--precision", "fp17"], ["'precision'", "'fp17'", PRECISION_CHOICES]),
    "batch-size": (["mlp", "--batch-size", "0"], ["'batch_size'", "= 0", "greater than or equal to 1"]),
    "device": (["mlp", "--device", "cuda"], ["'cuda'", "available here: cpu"]),
    "config-typo": (["mlp", "--config", "typo.yaml"], ["'batchsize'", "valid settings: batch_size|"]),
    "config-missing": (["mlp", "--config", "missing.yaml"], ["missing.yaml", "does not exist"]),
    "recipe": (["nosuch"], ["'nosuch'", "mlp|digits|chargpt", "module:function"]),
    "options": (["mlp", "--set", "options.lr=-1"], ["'options.lr'", "-1", "greater than 0"]),
    "no-recipe": ([], ["no recipe given", "mlp|digits|chargpt"]),
    "out-is-a-file": (["mlp", "--out", "typo.yaml/run"], ["--out 'typo.yaml/run'", "'typo.yaml' is a file"]),
    "checkpoint-dir-is-a-file": (
        ["mlp", "--set", "checkpoint_dir=typo.yaml"],
        ["checkpoint_dir 'typo.yaml'", "is a file, not a directory"],
    ),
}


def _check_one_line_error(returncode: int, stderr: str, expected: list[str]) -> None:
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gpulab: error: ") and "Traceback" not in stderr
    for part in expected:
        assert part in lines[0]


@pytest.fixture
def bad_input_dir(tmp_path, monkeypatch):
    (tmp_path / "typo.yaml").write_text("batchsize: 3\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(bad_input_dir, capfd, case):
    """In-process through the CLI entry point (fast); stderr is captured at the file-descriptor level."""
    from gpulab.cli import main

    args, expected = BAD_INPUTS[case]
    if case == "device" and _has_cuda():
        pytest.skip("this machine has a CUDA device")
    code = main(["train", "--out", "run", *args, "--max-steps", "2"])  # a later --out wins
    _check_one_line_error(code, capfd.readouterr().err, expected)
    assert not (bad_input_dir / "run" / "summary.json").exists()


@pytest.mark.parametrize("case", ["config-typo", "precision"])
def test_bad_input_in_a_real_process(bad_input_dir, case):
    """The same in a real process: nothing else (warnings, logging) reaches stderr either."""
    args, expected = BAD_INPUTS[case]
    proc = gpulab("train", *args, "--out", "run", "--max-steps", "2", cwd=bad_input_dir)
    _check_one_line_error(proc.returncode, proc.stderr, expected)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_debug_keeps_the_traceback(bad_input_dir):
    from gpulab.cli import main
    from gpulab.errors import ConfigError

    with pytest.raises(ConfigError, match="nosuch"):
        main(["--debug", "train", "nosuch"])


@pytest.mark.slow
def test_user_recipe_from_yaml_config(tmp_path):
    (tmp_path / "my_recipe_mod.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from gpulab.core.recipes.base import Recipe

            def build(options):
                width = options.get("width", 4)
                g = torch.Generator().manual_seed(0)
                x = torch.randn(64, 3, generator=g)
                y = x.sum(dim=1, keepdim=True)
                model = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 1))
                return Recipe(
                    model=model,
                    train_data=(x, y),
                    loss_fn=nn.functional.mse_loss,
                    optimizer=lambda p: torch.optim.SGD(p, lr=0.01),
                    defaults={"batch_size": 16},
                    info={"width": width},
                )
            """
        )
    )
    config = tmp_path / "run.yaml"
    config.write_text(
        "recipe: my_recipe_mod:build\ndevice: cpu\nmax_steps: 50\ntensorboard: false\noptions:\n  width: 7\n"
    )
    out = tmp_path / "out"
    proc = gpulab(
        "train",
        "--config",
        str(config),
        "--out",
        str(out),
        "--max-steps",
        "3",
        cwd=tmp_path,
        pythonpath=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipe"] == "my_recipe_mod:build"
    assert summary["steps"] == 3  # the flag overrides the YAML
    assert summary["width"] == 7  # options reach the recipe; its info reaches the summary
    assert summary["batch_size"] == 16  # the recipe's default
    assert summary["device"] == "cpu" and summary["accuracy"] is None  # no validation data
    assert len([r for r in _records(out / "metrics.jsonl") if "loss" in r]) == 1  # the final flush
    assert not (out / "tensorboard").exists()


def test_output_without_a_terminal_keeps_long_lines_whole(tmp_path):
    # Piped output once wrapped at 80 columns inside file paths (".../run/summa" + "ry.json").
    out = tmp_path / ("a_directory_name_long_enough_to_pass_eighty_columns_" * 2) / "run"
    proc = gpulab("train", "mlp", "--out", str(out), "--max-steps", "2", "--set", "mfu=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out / 'summary.json'} and {out / 'metrics.jsonl'}" in proc.stdout.splitlines()
