"""Every verb that writes replaces only what gpulab wrote there (issue 40): ``checkpoint export --to`` a file
whose safetensors header carries gpulab's mark, ``infer --out`` predictions whose zip comment does, ``bench``,
``tune`` and ``profile --out`` a folder that is new, empty or holds that verb's marker. Anything else is one
line, exit 2, and every byte of the user's tree is as it was. ``checkpoint export`` verifies the step it
copies as ``export`` does (a flipped byte in the latest is refused, never the previous step taken) and names
that step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from tree_hash import tree_hash

from gpulab.artifact.ownership import claim_output_folder
from gpulab.engines.torch.state.api import capture_rng, save_checkpoint


def _save(root, step: int) -> dict:
    torch.manual_seed(step)
    weights = torch.nn.Linear(4, 2).state_dict()
    state = {"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}}
    save_checkpoint(root, step=step, model_state=weights, state=state, meta={"metrics": {"loss": 1.0}})
    return weights


@pytest.fixture
def ckpts(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    _save(root, 1)
    _save(root, 2)
    return root


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_checkpoint_export_names_its_step_marks_its_file_and_replaces_only_that(ckpts, tmp_path, cli, capsys):
    out = tmp_path / "w.safetensors"
    assert cli("checkpoint", "export", ckpts.parent, "--to", out) == (0, "")
    assert f"wrote {out} (step 2, from {ckpts / 'step-00000002'})" in capsys.readouterr().out
    with safe_open(out, "pt") as handle:
        assert handle.metadata()["gpulab"] == "checkpoint export" and handle.metadata()["gpulab_step"] == "2"
    step2 = load_file(ckpts / "step-00000002" / "model.safetensors")
    assert load_file(out).keys() == step2.keys() and all(
        torch.equal(load_file(out)[k], v) for k, v in step2.items()
    )
    assert cli("checkpoint", "export", ckpts / "step-00000001", "--to", out) == (0, "")  # its own: replaced
    assert "(step 1, from" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_flipped_byte_in_the_latest_checkpoint_is_refused_not_the_previous_step_taken(ckpts, tmp_path, cli):
    weights = ckpts / "step-00000002" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 1
    weights.write_bytes(data)
    before = tree_hash(tmp_path)
    code, err = cli("checkpoint", "export", ckpts.parent, "--to", tmp_path / "w.safetensors")
    assert code == 2 and f"{weights}: checksum mismatch" in _one_line(err)
    assert tree_hash(tmp_path) == before


@pytest.mark.parametrize("target", ["mine.safetensors", "mine", "link.safetensors", "run/checkpoints", "run"])
def test_checkpoint_export_onto_what_gpulab_did_not_write_is_refused(ckpts, tmp_path, target, cli):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    (tmp_path / "mine.safetensors").write_bytes((ckpts / "step-00000001" / "model.safetensors").read_bytes())
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "mine" / "notes.txt")
    before = tree_hash(tmp_path)
    code, err = cli("checkpoint", "export", ckpts.parent, "--to", tmp_path / target)
    assert code == 2 and "gpulab did not write as a checkpoint export" in _one_line(err)
    assert f"--to {tmp_path / target}:" in err and "nothing was touched" in err
    assert tree_hash(tmp_path) == before


@pytest.mark.parametrize("target", ["mine.npz", "mine-dir.npz", "preds"])
def test_infer_out_onto_what_gpulab_did_not_write_or_without_npz_is_refused(tmp_path, target, cli):
    (tmp_path / "m.onnx").write_bytes(b"not read: the --out is refused first")
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 4), np.float32))
    np.savez(tmp_path / "mine.npz", output=np.ones(3))  # a user's own .npz, not gpulab's predictions
    (tmp_path / "mine-dir.npz").mkdir()
    (tmp_path / "mine-dir.npz" / "notes.txt").write_text("a user's file")
    before = tree_hash(tmp_path)
    code, err = cli("infer", tmp_path / "m.onnx", "--input", tmp_path / "in.npz", "--out", tmp_path / target)
    assert code == 2 and f"--out {tmp_path / target}:" in _one_line(err)
    said = (
        "give a name ending in .npz" if target == "preds" else "gpulab did not write as infer's predictions"
    )
    assert said in err
    assert tree_hash(tmp_path) == before  # no .tmp-PID-preds.npz either


VERBS = {
    "bench": ["bench", "matmul", "--smoke", "--device", "cpu"],
    "tune": ["tune", "mlp", "--budget", "5"],
    "profile": ["profile", "mlp", "--device", "cpu", "--no-peak"],
}


@pytest.mark.parametrize("target", ["mine", "afile", "other-verb", "mine/sub/below-a-file"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_report_folders_that_are_the_users_are_refused_before_any_work(tmp_path, verb, target, cli):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    (tmp_path / "mine" / "sub").write_text("a file where a folder would go")
    (tmp_path / "afile").write_text("a user's file")
    other = "tune" if verb != "tune" else "bench"
    claim_output_folder(tmp_path / "other-verb", other)
    before = tree_hash(tmp_path)
    code, err = cli(*VERBS[verb], "--out", tmp_path / target)
    assert code == 2 and f"--out {tmp_path / target}:" in _one_line(err)
    assert tree_hash(tmp_path) == before
