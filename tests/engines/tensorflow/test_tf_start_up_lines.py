"""TensorFlow's C++ start-up lines (written before its logging starts, whatever TF_CPP_MIN_LOG_LEVEL says,
once per library that links it: the oneDNN notice twice) do not reach the user's stderr; what else the
import writes there still does (issue 40)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

IMPORT = (
    "import sys\n"
    "from gpulab.engines.tensorflow.importing import require_tensorflow\n"
    "sys.stderr.write('before\\n')\n"
    "require_tensorflow()\n"
    "sys.stderr.write('after\\n')\n"
)


def test_the_start_up_lines_are_not_printed():
    done = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "absl::InitializeLog" not in done.stderr and "oneDNN" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[0] == "before" and done.stderr.splitlines()[-1] == "after"
