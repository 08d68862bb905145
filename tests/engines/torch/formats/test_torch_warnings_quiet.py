"""`export --format aoti` (and bench's aoti runtime) print no third-party FutureWarning: AOTInductor's
packaging deep-copies the ExportedProgram, and torch's pytree warns that its own LeafSpec is deprecated.
The filter silences that one message where gpulab calls into it, and nothing else."""

from __future__ import annotations

import copy
import warnings

import torch

from gpulab.engines.torch.formats.base import torch_internal_warnings_quiet


def _program():
    return torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 2)), (torch.randn(2, 4),))


def test_the_copy_aoti_makes_warns_without_the_filter_and_not_with_it():
    program = _program()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copy.deepcopy(program)
    assert any("LeafSpec" in str(w.message) for w in caught if w.category is FutureWarning)  # torch's own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch_internal_warnings_quiet():
            copy.deepcopy(program)
            warnings.warn("a user's own FutureWarning", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught if w.category is FutureWarning] == ["a user's own FutureWarning"]
