"""What the preemption tests of this folder share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def uninterrupted(gpulab_server, tmp_path_factory) -> Path:
    """``preempt_recipe``'s run never stopped, forked from the tests' fork server: the weights every signalled,
    requeued and resumed run of a module must end on (one such run a module, not one a signal)."""
    from test_cli_preemption import RUN, finished

    where = tmp_path_factory.mktemp("uninterrupted")
    code, stderr = finished(gpulab_server, *RUN, "--out", "ref", cwd=where, name="ref")
    assert code == 0, stderr
    return where / "ref"
