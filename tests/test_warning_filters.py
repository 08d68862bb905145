"""A user's own warning filters (-W, PYTHONWARNINGS) win over the ones gpulab adds (issue 40)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpulab.warning_filters import user_chose

# a name taken from a moved alias: gpulab shows its DeprecationWarning once
OLD_PATH = "import gpulab.train as old\ntry:\n    old.anything\nexcept AttributeError:\n    pass"


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("how", [("-W", "error"), ("-W", "error::DeprecationWarning")])
def test_a_users_w_error_turns_gpulabs_shown_warning_into_an_error(how):
    done = _python(*how, "-c", OLD_PATH)
    assert done.returncode == 1, done.stderr
    assert "MovedWarning" in done.stderr and "is deprecated" in done.stderr


def test_pythonwarnings_ignore_hides_it():
    done = _python("-c", OLD_PATH, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr


def test_without_a_users_filter_gpulab_shows_it_once():
    done = _python("-c", OLD_PATH, env={"PYTHONWARNINGS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("is deprecated") == 1


def test_which_options_reach_a_category(monkeypatch):
    for options, category, chose in [
        ([], FutureWarning, False),
        (["error"], FutureWarning, True),
        (["ignore::UserWarning"], FutureWarning, False),
        (["error::Warning"], FutureWarning, True),
        (["error::DeprecationWarning"], Warning, True),  # a part of what an ignore-all would hide
        (["error:some text:FutureWarning"], FutureWarning, True),
    ]:
        monkeypatch.setattr(sys, "warnoptions", options)
        assert user_chose(category) is chose, (options, category)
