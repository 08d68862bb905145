#!/usr/bin/env bash
# Create (or reuse) the virtual environment and install gpulab into it.
#   scripts/setup_env.sh VENV [EXTRAS]
# The CPU build of torch goes in first where this machine offers one as a local wheel (pip's find-links),
# so that the plain `torch` range in pyproject.toml never pulls a multi-GB CUDA build by accident.
# GPULAB_TORCH=keep skips that step (use the torch pip would choose, e.g. a CUDA build on a GPU box);
# GPULAB_TORCH=none too (a venv for the TensorFlow engine alone: extras without torch, `make test-tf-only`).
set -euo pipefail
venv=${1:-.venv}
extras=${2:-}
python=${PYTHON:-python3}

# pyproject.toml's requires-python, checked before anything is made: pip would refuse only after a venv of
# the old Python exists, and a re-run with a newer PYTHON would then reuse that venv and fail again.
too_old() { ! "$1" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; }
version() { "$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "not runnable"; }
if [ -x "$venv/bin/python" ]; then
    if too_old "$venv/bin/python"; then
        echo "setup: $venv has Python $(version "$venv/bin/python") and gpulab needs >= 3.10: rm -rf $venv, then run again with PYTHON=python3.10 (or newer) in the environment" >&2
        exit 2
    fi
else
    if too_old "$python"; then
        echo "setup: $python is Python $(version "$python") and gpulab needs >= 3.10: run again with PYTHON=python3.10 (or newer) in the environment, e.g. PYTHON=python3.11 make run" >&2
        exit 2
    fi
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --quiet)

if [ "${GPULAB_TORCH:-cpu}" = cpu ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    # --no-index: only local wheels (find-links) qualify; nothing is downloaded by this line.
    if "${pip[@]}" install --no-index --no-deps "torch==${GPULAB_TORCH_VERSION:-2.13.0}" 2>/dev/null; then
        echo "setup: installed the local CPU build of torch"
    else
        echo "setup: no local torch wheel; pip will choose torch from the index"
    fi
fi

spec="."
[ -n "$extras" ] && spec=".[$extras]"
"${pip[@]}" install -e "$spec"
