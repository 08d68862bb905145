"""What gpulab writes carries its mark, so that a later write replaces only gpulab's own: predictions whose
zip comment says so (NumPy does not see it), and a report folder claimed by one verb (new or empty), taken
again by that verb and refused to another. Through the CLI: ``tests/cli/test_cli_writes_only_its_own.py``."""

from __future__ import annotations

import numpy as np
import pytest

from gpulab.artifact.ownership import FOLDER_MARKER, OutputRefused, claim_output_folder
from gpulab.artifact.predictions import is_predictions, write_predictions


def test_predictions_carry_a_mark_numpy_does_not_see(tmp_path):
    ours, theirs = tmp_path / "p.npz", tmp_path / "q.npz"
    write_predictions(ours, {"output": np.arange(3.0), "top1": np.arange(3)})
    np.savez(theirs, output=np.arange(3.0))
    assert is_predictions(ours) and not is_predictions(theirs) and not is_predictions(tmp_path / "none.npz")
    assert sorted(np.load(ours).files) == ["output", "top1"]


def test_a_report_folder_is_claimed_when_new_or_empty_and_taken_again_by_its_own_verb(tmp_path):
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "new" / "deeper", tmp_path / "empty"):
        claim_output_folder(folder, "profile")
        (folder / "profile.json").write_text("{}")
        assert claim_output_folder(folder, "profile") == folder  # its own, again
        assert (folder / FOLDER_MARKER).is_file()
        with pytest.raises(OutputRefused, match="gpulab did not write as gpulab bench's output"):
            claim_output_folder(folder, "bench")
