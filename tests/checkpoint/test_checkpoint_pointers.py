"""Checkpoint pointers stay inside the run: ``latest`` and ``step-*`` names resolve only within the root,
the step a checkpoint records is its name's, and anything else is one line and the newest valid step."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gpulab.checkpoint.io import write_manifest
from gpulab.checkpoint.locate import locate_for_resume
from gpulab.engines.torch.state.api import (
    capture_rng,
    inspect_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from gpulab.errors import GpulabWarning


def _save(root: Path, step: int) -> Path:
    torch.manual_seed(step)
    return save_checkpoint(
        root,
        step=step,
        model_state=torch.nn.Linear(2, 2).state_dict(),
        state={"rng": capture_rng(), "progress": {"epoch": 0, "global_step": step}},
        meta={"metrics": {"loss": 1.0}},
    )


@pytest.fixture()
def roots(tmp_path) -> tuple[Path, Path]:
    """A run's root with steps 10 and 20, and another run's root with a step 30 of its own."""
    root, elsewhere = tmp_path / "run" / "checkpoints", tmp_path / "elsewhere"
    _save(root, 10)
    _save(root, 20)
    _save(elsewhere, 30)
    return root, elsewhere


def _resume(root: Path) -> tuple[Path, dict, list[str]]:
    extras: dict = {}
    runtime = SimpleNamespace(world_size=1, rank=0, is_rank_zero=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = locate_for_resume(root, "latest", runtime, extras)
    return found, extras, [str(w.message) for w in caught if issubclass(w.category, GpulabWarning)]


def test_latest_naming_a_path_outside_the_root_is_not_followed(roots):
    root, elsewhere = roots
    (root / "latest").write_text("../../elsewhere/step-00000030\n")
    found, extras, said = _resume(root)
    assert found == root / "step-00000020"
    assert len(said) == 1 and "latest refused" in said[0] and "step-00000020" in said[0]
    assert extras["refused_checkpoints"][0]["path"] == str(root / "latest")
    assert (root / "latest").exists() and (elsewhere / "step-00000030").is_dir()  # nothing moved


def test_latest_as_a_symlink_is_not_followed(roots):
    root, elsewhere = roots
    (root / "latest").unlink()
    (root / "latest").symlink_to(elsewhere / "latest")
    found, _, said = _resume(root)
    assert found == root / "step-00000020" and "symbolic link" in said[0]


def test_a_step_directory_linking_outside_is_refused_and_set_aside(roots):
    root, elsewhere = roots
    (root / "step-00000030").symlink_to(elsewhere / "step-00000030")
    (root / "latest").write_text("step-00000030\n")
    found, extras, said = _resume(root)
    assert found == root / "step-00000020"
    assert "leads outside" in said[0] and len(said) == 1
    assert (root / "step-00000030.refused").is_symlink()  # the link set aside; its target untouched
    assert (elsewhere / "step-00000030" / "MANIFEST.json").is_file()


def test_a_step_holding_another_step_is_refused(roots):
    root, _ = roots
    shutil.copytree(root / "step-00000010", root / "step-00000030")  # MANIFEST and all: it verifies
    (root / "latest").write_text("step-00000030\n")
    found, _, said = _resume(root)
    assert found == root / "step-00000020"
    assert "records step 10, but the directory is step 30" in said[0]


def test_a_renamed_step_whose_meta_was_rewritten_is_refused_by_its_state(roots):
    """meta.json edited to match the name and the MANIFEST rewritten: state.pt still says step 10."""
    from gpulab.engines.torch.train.saving import Checkpointer

    root, _ = roots
    copy = root / "step-00000030"
    shutil.copytree(root / "step-00000010", copy)
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "step": 30}))
    write_manifest(copy)
    (root / "latest").write_text("step-00000030\n")
    trainer = SimpleNamespace(runtime=SimpleNamespace(world_size=1, rank=0, is_rank_zero=True), extras={})
    with pytest.raises(Exception, match="state.pt: records step 10, but the directory is step 30"):
        Checkpointer(root, None, None).resume(trainer, "latest", force=True)


def test_latest_naming_a_missing_step_falls_back_with_a_line(roots):
    root, _ = roots
    (root / "latest").write_text("step-00000040\n")
    found, _, said = _resume(root)
    assert found == root / "step-00000020"
    assert len(said) == 1 and "names step-00000040, which does not exist" in said[0]


def test_inspect_says_what_it_passed_over_and_inspects_the_newest_valid_step(roots):
    root, elsewhere = roots
    (root / "latest").write_text("../../elsewhere/step-00000030\n")
    report = inspect_checkpoint(root)
    assert report["valid"] and report["step"] == 20 and report["path"] == str(root / "step-00000020")
    assert "latest refused" in report["notes"][0] and "step-00000020" in report["notes"][-1]
    # Directly named, a step holding another step is invalid, with the line saying why.
    shutil.copytree(root / "step-00000010", root / "step-00000030")
    report = inspect_checkpoint(root / "step-00000030")
    assert not report["valid"] and "records step 10" in report["problems"][0]
    # resolve_checkpoint (export weights) takes the same way round.
    assert resolve_checkpoint(root) == root / "step-00000020"
