"""`gpulab checkpoint inspect|export` and `gpulab train --resume` as a user meets them. Checks that read only
exit code, output and files run through the CLI's main() in the test process (``cli``); the trained run
is a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file


def gpulab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "mlp"
    proc = gpulab(
        "train",
        "mlp",
        "--out",
        str(out),
        "--max-steps",
        "12",
        "--set",
        "checkpoint_every=6",
        "--set",
        "tensorboard=false",
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_inspect_and_export(run_dir, tmp_path, cli, capsys):
    code, err = cli("checkpoint", "inspect", run_dir / "checkpoints", "--json")
    assert code == 0, err
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["step"] == 12
    assert {f["name"] for f in report["files"]} >= {"model.safetensors", "state.pt", "meta.json"}
    # The table prints every metric as a person reads it: at most six significant digits.
    cli("checkpoint", "inspect", run_dir / "checkpoints")
    text = capsys.readouterr().out
    for key, value in report["metrics"].items():
        assert (
            f"  {key} = {value:.6g}\n" in text if isinstance(value, float) else f"  {key} = {value}\n" in text
        )
    dest = tmp_path / "mlp.safetensors"
    assert cli("checkpoint", "export", run_dir / "checkpoints", "--to", dest)[0] == 0
    assert "0.weight" in load_file(dest)


def test_resume_with_changed_batch_size_is_refused_with_the_differences(run_dir, cli):
    code, err = cli("train", "mlp", "--out", run_dir, "--max-steps", "20", "--resume", "latest",
                    "--batch-size", "32", "--seed", "5")  # fmt: skip
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "batch_size 64 -> 32" in err and "seed 0 -> 5" in err and "force_resume" in err


def test_corrupt_checkpoint_is_one_line_and_loses_nothing(run_dir, tmp_path, cli):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    weights = copy / "checkpoints" / "step-00000012" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one bit flipped: only the checksum can tell
    weights.write_bytes(bytes(data))
    before = sorted(p.name for p in (copy / "checkpoints").iterdir())
    code, err = cli("train", "mlp", "--out", copy, "--max-steps", "20", "--resume", weights.parent)
    assert code == 2
    assert "model.safetensors" in err and "sha256" in err.lower()
    assert err.count("\n") == 1
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == before
    assert cli("checkpoint", "inspect", weights.parent)[0] == 1


def test_resume_continues_to_the_new_step_count(run_dir):
    proc = gpulab("train", "mlp", "--out", str(run_dir), "--max-steps", "18", "--resume", "latest")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 18


@pytest.mark.parametrize("odd", [{"metrics": 5}, {"metrics": [1, 2]}, {"step": "twelve", "versions": "x"}])
def test_inspect_reports_odd_meta_fields_instead_of_crashing(run_dir, tmp_path, capsys, odd):
    """meta.json is human-readable and may be edited by hand; a field of the wrong type is a problem."""
    import hashlib
    import shutil

    from gpulab.cli import main

    ckpt = tmp_path / "step-00000012"
    shutil.copytree(run_dir / "checkpoints" / "step-00000012", ckpt)
    meta = {**json.loads((ckpt / "meta.json").read_text()), **odd}
    data = json.dumps(meta).encode()
    (ckpt / "meta.json").write_bytes(data)
    manifest = json.loads((ckpt / "MANIFEST.json").read_text())  # the checksum agrees: only the types differ
    manifest["files"]["meta.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))
    for extra in ([], ["--json"]):
        assert main(["checkpoint", "inspect", str(ckpt), *extra]) == 1
        out = capsys.readouterr().out
        for key in odd:
            assert f"meta.json: '{key}' is" in out


def test_a_run_directory_means_its_checkpoints(run_dir, tmp_path, capsys):
    # As `gpulab export RUN` takes a run: `checkpoint inspect runs/x` said INVALID ("no complete checkpoint")
    # about a run whose checkpoints were fine.
    from gpulab.cli import main

    assert main(["checkpoint", "inspect", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["checkpoint", "inspect", str(run_dir / "checkpoints"), "--json"]) == 0
    assert report["valid"] and report == json.loads(capsys.readouterr().out)  # the same latest checkpoint
    assert main(["checkpoint", "export", str(run_dir), "--to", str(tmp_path / "w.safetensors")]) == 0
    assert "0.weight" in load_file(tmp_path / "w.safetensors")
