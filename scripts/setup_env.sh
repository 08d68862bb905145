#!/usr/bin/env bash
# Create (or reuse) the virtual environment and install gpulab into it.
#   scripts/setup_env.sh VENV [EXTRAS]
# The CPU build of torch goes in first where this machine offers one as a local wheel (pip's find-links),
# so that the plain `torch` range in pyproject.toml never pulls a multi-GB CUDA build by accident.
# GPULAB_TORCH=keep skips that step (use the torch pip would choose, e.g. a CUDA build on a GPU box).
set -euo pipefail
venv=${1:-.venv}
extras=${2:-}
python=${PYTHON:-python3}

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet)

if [ "${GPULAB_TORCH:-cpu}" != keep ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
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
