"""The proof of the seam: a third engine (NumPy gradient descent on a linear model, ``numpy_engine.py``)
registered for the test trains through ``gpulab train``, checkpoints, resumes exactly and writes the
summary -- its loop, run directory and checkpoint storage are the project's; its own file holds only its
step, its state and its facts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy_engine  # (tests/core is on the path)

from gpulab.cli import main


def train(capsys, out: Path, *args: str) -> str:
    """``gpulab train linear --engine numpy ...`` in this process (the CLI's own main); its output."""
    flags = ["train", "linear", "--engine", "numpy", "--out", str(out), "--set", "progress=false", *args]
    code = main(flags)
    output = capsys.readouterr()
    assert code == 0, output.out + output.err
    return output.out


def weights(out: Path) -> tuple[np.ndarray, float]:
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    with np.load(latest / numpy_engine.WEIGHTS) as saved:
        return saved["w"].copy(), float(saved["b"])


def test_a_third_engine_trains_checkpoints_and_resumes_exactly_through_gpulab_train(
    numpy_registered, tmp_path, capsys
):
    # 100 samples in batches of 16: 7 batches an epoch, windows of 2 (the last one short): 4 steps an epoch.
    common = ["--accumulate", "2", "--set", "checkpoint_every=3", "--set", "log_every=2"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(capsys, whole, "--max-steps", "10", *common)
    train(capsys, parts, "--max-steps", "5", *common)  # stops inside epoch 2, between windows
    train(capsys, parts, "--max-steps", "10", "--resume", "latest", *common)

    (w_whole, b_whole), (w_parts, b_parts) = weights(whole), weights(parts)
    assert w_whole.tobytes() == w_parts.tobytes() and b_whole == b_parts  # bit for bit
    assert w_whole.any()  # it trained

    summary = json.loads((parts / "summary.json").read_text())
    assert summary["engine"] == "numpy" and summary["recipe"] == "linear"
    assert summary["steps"] == 10 and summary["epochs"] == 3 and summary["accumulate"] == 2
    assert summary["device"] == "cpu" and summary["precision"] == "fp64"
    assert summary["resumed_from"].endswith("step-00000005")
    assert summary["val_loss"] is not None and summary["untimed_s"] >= 0.0
    for key in ("samples_per_s", "train_seconds", "data_wait_s", "machine_load", "diagnosis", "environment"):
        assert key in summary
    # The loop's log lines: every 2 steps, with the epoch each names, the resumed run appending.
    logged = [json.loads(line) for line in (parts / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in logged if "loss" in r]
    assert steps == [2, 4, 5, 6, 8, 10]
    assert sorted(p.name for p in (whole / "checkpoints").glob("step-*")) == [
        "step-00000003", "step-00000004", "step-00000006", "step-00000008", "step-00000009", "step-00000010",
    ]  # fmt: skip


def test_resuming_a_finished_run_of_the_third_engine_says_there_is_nothing_left(
    numpy_registered, tmp_path, capsys
):
    train(capsys, tmp_path / "run", "--max-steps", "4")
    before = (tmp_path / "run" / "summary.json").read_text()
    output = train(capsys, tmp_path / "run", "--max-steps", "4", "--resume", "latest")
    assert "nothing to do:" in output and "is at step 4 of 4; raise max_steps" in output
    assert (tmp_path / "run" / "summary.json").read_text() == before


def test_a_verb_the_third_engine_lacks_is_one_line_naming_the_engines_that_have_it(
    numpy_registered, tmp_path, capsys
):
    """The engine offers no export: ``gpulab export`` of its run says so and where export is, exit 2."""
    train(capsys, tmp_path / "run", "--max-steps", "2")
    code = main(["export", str(tmp_path / "run"), "--format", "onnx"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "gpulab: error: the numpy engine has no export; engines that do: torch|tensorflow"
    )
    assert not (tmp_path / "run" / "export").exists()


def test_the_third_engines_run_is_diagnosed_in_no_other_engines_words(numpy_registered, tmp_path, capsys):
    """It offers no diagnosis: its summary's fix names no torch DataLoader workers (once advised)."""
    train(capsys, tmp_path / "run", "--max-steps", "2")
    diagnosis = json.loads((tmp_path / "run" / "summary.json").read_text())["diagnosis"]
    assert diagnosis["fix"] and "num_workers" not in json.dumps(diagnosis) and "torch" not in diagnosis["fix"]


def test_checkpoint_inspect_of_the_third_engine_names_the_engines_that_read_their_files(
    numpy_registered, tmp_path, capsys
):
    """It checkpoints (its layout verified by the project's storage) but reads no checkpoint for inspect."""
    train(capsys, tmp_path / "run", "--max-steps", "2")
    assert main(["checkpoint", "inspect", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == (
        "gpulab: error: the numpy engine has no checkpoint inspect; engines that do: torch|tensorflow"
    )
